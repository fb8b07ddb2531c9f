package natsconn

// EventHeader names the NATS header of a CloudEvents attribute in binary content mode,
// as the NATS protocol binding has it (version 1.0.1 and later, which uses the message
// headers of NATS 2.2): "ce-" and the attribute's name, and datacontenttype as
// content-type. The nats and jetstream drivers share it.
func EventHeader(attr string) string {
	if attr == "datacontenttype" {
		return "content-type"
	}
	return "ce-" + attr
}
