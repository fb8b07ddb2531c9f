package demo

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestAnUnknownDriverIsRefusedAsAnOptionErrorNamingTheKnownOnes(t *testing.T) {
	o := DefaultOptions()
	o.Driver = "carrier-pigeon"
	err := Run(context.Background(), o)
	var opt OptionError
	if !errors.As(err, &opt) {
		t.Fatalf("--driver carrier-pigeon: %v, want an OptionError", err)
	}
	for _, typ := range TargetTypes() {
		if !strings.Contains(err.Error(), typ) {
			t.Fatalf("the refusal %q does not name %s", err, typ)
		}
	}
}

func TestTheDefaultDriverIsTheFirstTarget(t *testing.T) {
	if got := DefaultOptions().Driver; got != TargetTypes()[0] {
		t.Fatalf("default --driver %q, want %q", got, TargetTypes()[0])
	}
}
