package ops_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/ops"
)

func TestPickFindsTheOutboxARequestAddresses(t *testing.T) {
	t.Parallel()
	two := []ops.Target{{Name: "shop", Streams: []string{"orders", "carts"}}, {Name: "billing", Streams: []string{"orders", "invoices"}}}
	for _, c := range []struct {
		name           string
		targets        []ops.Target
		outbox, stream string
		want           int
		refused        string
	}{
		{"a named outbox is chosen", two, "billing", "carts", 1, ""},
		{"the only outbox needs no name", two[:1], "", "", 0, ""},
		{"a stream one outbox has picks it", two, "", "invoices", 1, ""},
		{"a stream two outboxes have is refused naming both", two, "", "orders", 0, `stream "orders" is configured in several outboxes (shop, billing)`},
		{"a stream no outbox has is refused", two, "", "nope", 0, `stream "nope" is configured in none of the outboxes (shop, billing)`},
		{"no stream and no name among several is refused", two, "", "", 0, "serves several outboxes (shop, billing)"},
		{"an unknown name is refused", two, "nope", "", 0, `no outbox named "nope"`},
	} {
		got, err := ops.Pick(c.targets, c.outbox, c.stream)
		switch {
		case c.refused == "" && (err != nil || got != c.want):
			t.Errorf("%s: got %d, %v; want %d", c.name, got, err, c.want)
		case c.refused != "" && (!errors.Is(err, ops.ErrInvalid) || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: got %v, want ErrInvalid saying %q", c.name, err, c.refused)
		}
	}
}
