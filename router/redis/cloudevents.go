package redis

// EventHeader names the header of a CloudEvents attribute. Redis has no CloudEvents
// binding; outboxd follows the HTTP binding's names, so each attribute is the entry's
// field "h:ce-<attribute>" and datacontenttype is "h:content-type".
func (d *Driver) EventHeader(attr string) string { return eventHeader(attr) }

func eventHeader(attr string) string {
	if attr == "datacontenttype" {
		return "content-type"
	}
	return "ce-" + attr
}
