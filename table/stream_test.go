package table_test

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/table"
)

func TestStreamNames(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream string
		ok     bool
	}{
		{"A lower-case word is a stream name.", "orders", true},
		{"Digits, dots, dashes and single underscores are allowed.", "shop.orders-v2_eu", true},
		{"A name may start with a digit.", "2fa", true},
		{"63 bytes are allowed.", strings.Repeat("a", 63), true},
		{"An empty name is refused.", "", false},
		{"64 bytes are refused.", strings.Repeat("a", 64), false},
		{"Upper case is refused.", "Orders", false},
		{"A leading dot is refused.", ".orders", false},
		{"A leading dash is refused.", "-orders", false},
		{"A space is refused.", "my orders", false},
		{"A slash is refused.", "shop/orders", false},
		{"A double underscore, the environment's segment separator, is refused.", "shop__orders", false},
		{"A NUL byte is refused.", "orders\x00", false},
		{"Non-ASCII letters are refused.", "bestellüngen", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := table.CheckStream(c.stream)
			if (err == nil) != c.ok {
				t.Fatalf("CheckStream(%q) = %v, want ok=%v", c.stream, err, c.ok)
			}
		})
	}
}
