package dispatch

import (
	"context"
	"errors"

	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// writeBackHeld applies the outcomes of a claim held in a transaction (transaction
// mode, store/held.go): every write-back runs in the claim's transaction, and the
// acknowledgement goes with its commit, in one round trip. Nothing is retried: a
// statement that fails aborts the transaction, which then rolls back, and every row of
// the batch is pending again as before its claim, to be published again (at least
// once). A failed write-back so spends no attempt and loses nothing. Counts are what
// the commit kept, none when it failed.
func (p *Pipeline) writeBackHeld(ctx context.Context, claim store.Claim, o outcomes) events.Iteration {
	ev := events.Iteration{ErrorKinds: o.errorKinds, OrderViolations: o.violations}
	// Write-backs run even after shutdown began, as in lease mode; one bound for all.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastWriteTimeout)
	defer cancel()
	t := claim.Token
	var failed []store.FailedRow
	failReason := make(map[int64]string, len(o.fails))
	var n events.Iteration // counts, kept only if the commit succeeds
	err := func() error {
		if len(o.fails) > 0 {
			res, err := p.store.Fail(wctx, t, o.fails)
			if err != nil {
				return err
			}
			failed = append(failed, res.Rows...)
			n.Failed, n.LeaseConflicts = res.Changed, n.LeaseConflicts+res.Refused
		}
		if len(o.retries) > 0 {
			res, err := p.store.Retry(wctx, t, o.retries)
			if err != nil {
				return err
			}
			n.Retried, n.LeaseConflicts = res.Changed, n.LeaseConflicts+res.Refused
		}
		if len(o.defers) > 0 {
			res, err := p.store.Defer(wctx, t, o.defers, p.cfg.MaxDefer)
			if err != nil {
				return err
			}
			failed = append(failed, res.Expired...)
			k := deferExpired(res, failReason, &n)
			n.Deferred, n.LeaseConflicts = res.Changed-k, n.LeaseConflicts+res.Refused
		}
		res, err := p.store.Commit(wctx, t, o.acks)
		if err != nil {
			return err
		}
		n.Published, n.DeliveryLags, n.LeaseConflicts = res.Changed, res.Lags, n.LeaseConflicts+res.Refused
		return nil
	}()
	if err != nil {
		p.store.Rollback(wctx, t) // nothing to do when the commit itself failed
		ev.Err = err
		if !errors.Is(err, context.Canceled) || ctx.Err() == nil {
			p.log.Error("write-back failed; the batch's transaction rolled back, its rows are pending again",
				"rows", len(claim.Messages), "err", err)
		}
		return ev
	}
	ev.Published, ev.DeliveryLags, ev.Failed, ev.Retried, ev.Deferred = n.Published, n.DeliveryLags, n.Failed, n.Retried, n.Deferred
	ev.Released, ev.HeldBack, ev.LeaseConflicts = len(o.releases), len(o.heldBack), n.LeaseConflicts
	ev.FailReasons = o.reasons
	for reason, k := range n.FailReasons {
		if ev.FailReasons == nil {
			ev.FailReasons = map[string]int{}
		}
		ev.FailReasons[reason] += k
	}
	if ev.LeaseConflicts > 0 {
		p.log.Warn("write-back refused rows its transaction held", "rows", ev.LeaseConflicts)
	}
	p.reportFailed(claim, o, failed, failReason)
	return ev
}
