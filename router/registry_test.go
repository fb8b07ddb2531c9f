package router_test

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
	"github.com/outboxd/outboxd/router/kafka"
)

func TestARegistrationRefusesOptionsOfAnotherType(t *testing.T) {
	t.Parallel()
	reg := router.Register(discard.Type, discard.DefaultOptions, discard.New)
	if _, err := reg.New("bus", kafka.DefaultOptions(), nil); err == nil || !strings.Contains(err.Error(), "kafka.Options") {
		t.Fatalf("New with kafka options = %v, want an error naming them", err)
	}
	d, err := reg.New("sink", reg.Options(), nil)
	if err != nil {
		t.Fatalf("New with its own defaults: %v", err)
	}
	if _, ok := d.(*discard.Driver); !ok {
		t.Fatalf("New built %T, want *discard.Driver", d)
	}
	_ = d.Close()
}

func TestARegistryBuildsOnlyTheTypesItLists(t *testing.T) {
	t.Parallel()
	reg := router.Registry{router.Register(discard.Type, discard.DefaultOptions, discard.New)}
	if got := reg.Types(); len(got) != 1 || got[0] != discard.Type {
		t.Fatalf("Types() = %q", got)
	}
	if _, err := reg.Build("bus", kafka.Type, kafka.DefaultOptions(), nil); err == nil ||
		!strings.Contains(err.Error(), `drivers.bus.type: unknown driver type "kafka"`) {
		t.Fatalf("Build of an unlisted type = %v", err)
	}
	d, err := reg.Build("sink", discard.Type, discard.Options{}, nil)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	_ = d.Close()
}
