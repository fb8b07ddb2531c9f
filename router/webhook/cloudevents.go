package webhook

// EventHeader names the request header of a CloudEvents attribute in binary content
// mode, as the HTTP protocol binding has it: "ce-" and the attribute's name, and
// datacontenttype as content-type, which the driver sends as Content-Type. In batch
// mode each message's element carries the same headers; that is no CloudEvents
// batch format.
func (d *Driver) EventHeader(attr string) string { return eventHeader(attr) }

func eventHeader(attr string) string {
	if attr == "datacontenttype" {
		return "content-type"
	}
	return "ce-" + attr
}
