package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/router/driveropt"
)

// FileKey is the Problem.Key of problems with the file as a whole: it cannot be read,
// is not YAML, or is not a mapping.
const FileKey = "(file)"

// Problem is one thing wrong with the configuration. Its Key is the dotted path of
// the setting ("streams.orders.batch_size"), the name of an environment variable that
// matches no setting, or FileKey. It is the type driver options report theirs in.
type Problem = driveropt.Problem

// Problems is every problem found, sorted by key. Load and Validate return it as their
// error so that an operator fixes a configuration in one pass, not one error per run.
type Problems struct {
	List []Problem
}

func (p *Problems) Error() string {
	list := slices.Clone(p.List)
	sortProblems(list)
	var b strings.Builder
	fmt.Fprintf(&b, "configuration has %d problem(s):", len(list))
	for _, q := range list {
		b.WriteString("\n  ")
		b.WriteString(q.Error())
	}
	return b.String()
}

// Unwrap exposes each Problem to errors.As.
func (p *Problems) Unwrap() []error {
	errs := make([]error, len(p.List))
	for i, q := range p.List {
		errs[i] = q
	}
	return errs
}

// Keys returns the distinct keys that have problems, sorted.
func (p *Problems) Keys() []string {
	var keys []string
	for _, q := range p.List {
		keys = append(keys, q.Key)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func sortProblems(list []Problem) {
	slices.SortStableFunc(list, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Msg, b.Msg))
	})
}

// problems collects Problems while a configuration is examined.
type problems struct {
	list []Problem
}

func (ps *problems) add(key, format string, args ...any) {
	ps.list = append(ps.list, Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// err returns nil or a sorted, de-duplicated *Problems; never a typed nil.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	list := slices.Clone(ps.list)
	sortProblems(list)
	list = slices.Compact(list)
	return &Problems{List: list}
}
