package main

import (
	"debug/elf"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutboxdLinksNeitherTextTemplateNorGRPC guards the size and memory of outboxd:
// text/template calls methods found by name at run time, so once it is linked the
// linker keeps every exported method of every type that can reach an interface (the
// binary grew from 22 to 35 MB that way, and its resident pages with it). gRPC is here
// because it links x/net/trace, which links html/template; outboxd speaks OTLP/HTTP and
// needs none of it.
func TestOutboxdLinksNeitherTextTemplateNorGRPC(t *testing.T) {
	t.Parallel()
	f, err := elf.Open(filepath.Join(builtBinaries(t), "outboxd"))
	var notELF *elf.FormatError
	if errors.As(err, &notELF) {
		t.Skip("outboxd is not an ELF binary on this system; the symbol check reads ELF")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("outboxd's symbols (the test build keeps them): %v", err)
	}
	forbidden := []string{"text/template.", "html/template.", "google.golang.org/grpc."}
	found := map[string]string{}
	for _, s := range syms {
		for _, prefix := range forbidden {
			if _, seen := found[prefix]; !seen && strings.HasPrefix(s.Name, prefix) {
				found[prefix] = s.Name
			}
		}
	}
	for _, prefix := range forbidden {
		if name, ok := found[prefix]; ok {
			t.Errorf("outboxd links %s… (e.g. %s): find who imports it with go list -deps -f '{{.ImportPath}} {{.Imports}}' ./cmd/outboxd", prefix, name)
		}
	}
}
