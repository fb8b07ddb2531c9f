package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/outboxd/outboxd/router"
)

var _ router.Prober = (*Driver)(nil)

// Probe sends a HEAD to the endpoint's origin (scheme, host and port), or, for a
// non-empty dest, to the URL of that topic. Any answer, whatever its status, means the
// endpoint is reachable: whether it takes a topic is known only from its answer to a
// message.
func (d *Driver) Probe(ctx context.Context, dest string) error {
	target := d.url.origin
	if dest != "" {
		target = d.url.resolve(dest)
	}
	where := shown(target)
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, target, http.NoBody)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &requestError{Method: http.MethodHead, URL: where, Err: err}
	}
	for k, v := range d.static {
		req.Header[k] = v
	}
	resp, err := d.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &requestError{Method: http.MethodHead, URL: where, Err: err, TimedOut: ctx.Err() != nil, Timeout: d.timeout}
	}
	return resp.Body.Close()
}
