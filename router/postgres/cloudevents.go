package postgres

// EventHeader names the header of a CloudEvents attribute. PostgreSQL has no
// CloudEvents binding; outboxd follows the HTTP binding's names, so each attribute is
// the key "ce-<attribute>" of the inbox row's headers and datacontenttype is
// "content-type".
func (d *Driver) EventHeader(attr string) string { return eventHeader(attr) }

func eventHeader(attr string) string {
	if attr == "datacontenttype" {
		return "content-type"
	}
	return "ce-" + attr
}
