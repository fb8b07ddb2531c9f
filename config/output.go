package config

import (
	"bytes"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// YAML renders the effective configuration, redacted, with the keys the file uses, for
// `outboxd config check`. A driver shows its type and its options, so the output of a
// valid configuration loads back to the same configuration (secrets aside).
func (c Config) YAML() []byte {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	root := toNode(reflect.ValueOf(c.Redacted()))
	if len(c.Outboxes) > 0 { // each entry names its own; the file may not set them twice
		var kept []*yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			if k := root.Content[i].Value; !slices.Contains(topLevelOnly, k) && k != "streams" {
				kept = append(kept, root.Content[i], root.Content[i+1])
			}
		}
		root.Content = kept
	}
	// Encoding a tree of plain nodes cannot fail.
	_ = enc.Encode(root)
	_ = enc.Close()
	return b.Bytes()
}

// LogValue implements slog.LogValuer with the redacted configuration, keyed as in the
// file.
func (c Config) LogValue() slog.Value { return toLogValue(reflect.ValueOf(c.Redacted())) }

// LogValue implements slog.LogValuer with the redacted driver.
func (d Driver) LogValue() slog.Value { return toLogValue(reflect.ValueOf(d.Redacted())) }

func sortedKeys(m reflect.Value) []reflect.Value {
	keys := m.MapKeys()
	slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
	return keys
}

func scalarNode(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

func toNode(v reflect.Value) *yaml.Node {
	switch kindOf(v.Type()) {
	case kindStruct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, f := range fieldsOf(v.Type()) {
			fv := v.FieldByIndex(f.index)
			if f.kind == kindOptions { // its keys sit in the driver's section
				if !fv.IsNil() {
					n.Content = append(n.Content, toNode(fv.Elem()).Content...)
				}
				continue
			}
			n.Content = append(n.Content, scalarNode("!!str", f.name), toNode(fv))
		}
		return n
	case kindMap:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		for _, k := range sortedKeys(v) {
			n.Content = append(n.Content, scalarNode("!!str", k.String()), toNode(v.MapIndex(k)))
		}
		return n
	case kindEntries:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		for i := range v.Len() {
			n.Content = append(n.Content, toNode(v.Index(i)))
		}
		return n
	case kindList:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		for i := range v.Len() {
			n.Content = append(n.Content, scalarNode("!!str", v.Index(i).String()))
		}
		return n
	case kindInt:
		return scalarNode("!!int", strconv.FormatInt(v.Int(), 10))
	case kindBool:
		return scalarNode("!!bool", strconv.FormatBool(v.Bool()))
	case kindFloat:
		return scalarNode("!!float", formatFloat(v.Float()))
	case kindDuration:
		return scalarNode("!!str", formatDuration(time.Duration(v.Int())))
	default: // string, secret
		return scalarNode("!!str", v.String())
	}
}

// formatFloat prints f so that YAML reads it back as a float (1.0, not 1).
func formatFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	return s
}

func toLogValue(v reflect.Value) slog.Value {
	switch kindOf(v.Type()) {
	case kindStruct:
		var attrs []slog.Attr
		for _, f := range fieldsOf(v.Type()) {
			fv := v.FieldByIndex(f.index)
			if f.kind == kindOptions { // its keys sit in the driver's group
				if !fv.IsNil() {
					attrs = append(attrs, toLogValue(fv.Elem()).Group()...)
				}
				continue
			}
			attrs = append(attrs, slog.Attr{Key: f.name, Value: toLogValue(fv)})
		}
		return slog.GroupValue(attrs...)
	case kindMap:
		var attrs []slog.Attr
		for _, k := range sortedKeys(v) {
			attrs = append(attrs, slog.Attr{Key: k.String(), Value: toLogValue(v.MapIndex(k))})
		}
		return slog.GroupValue(attrs...)
	case kindEntries:
		attrs := make([]slog.Attr, v.Len())
		for i := range v.Len() {
			attrs[i] = slog.Attr{Key: strconv.Itoa(i), Value: toLogValue(v.Index(i))}
		}
		return slog.GroupValue(attrs...)
	case kindList:
		return slog.AnyValue(slices.Clone(v.Interface().([]string)))
	case kindInt:
		return slog.Int64Value(v.Int())
	case kindBool:
		return slog.BoolValue(v.Bool())
	case kindFloat:
		return slog.Float64Value(v.Float())
	case kindDuration:
		return slog.StringValue(formatDuration(time.Duration(v.Int())))
	default: // string, secret (already redacted)
		return slog.StringValue(v.String())
	}
}
