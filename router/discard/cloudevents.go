package discard

// EventHeader names the header of a CloudEvents attribute as the HTTP binding does, so
// that a stream in format cloudevents can be measured against the discard driver.
func (d *Driver) EventHeader(attr string) string {
	if attr == "datacontenttype" {
		return "content-type"
	}
	return "ce-" + attr
}
