package rabbitmq

// EventHeader names where a CloudEvents attribute travels in binary content mode, as
// the AMQP protocol binding has it: an application property (a header) named
// "cloudEvents:" and the attribute's name, the binding's first choice (it allows
// "cloudEvents_" for JMS only), and datacontenttype as the content-type header, which
// the driver sends as the content_type property.
func (d *Driver) EventHeader(attr string) string { return eventHeader(attr) }

func eventHeader(attr string) string {
	if attr == "datacontenttype" {
		return contentTypeHeader
	}
	return "cloudEvents:" + attr
}
