package webhook

import "time"

// SetNow replaces the driver's clock, which dates signatures and reads Retry-After dates.
func SetNow(d *Driver, now func() time.Time) { d.now = now }
