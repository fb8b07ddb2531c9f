package dispatch

import (
	"math/rand/v2"
	"time"
)

// backoff returns the pause before attempt number attempt (1 for the first retry):
// initial doubling per attempt up to ceiling, then a random cut of up to a half ("equal
// jitter") so that messages refused together do not return together.
func backoff(initial, ceiling time.Duration, attempt int) time.Duration {
	if initial <= 0 {
		return 0
	}
	d := initial
	for i := 1; i < attempt && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// jitter spreads d by up to ±10% so replicas do not poll in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	spread := int64(d) / 5
	return d - time.Duration(spread/2) + time.Duration(rand.Int64N(spread+1))
}
