package kafka

// EventHeader names the Kafka header of a CloudEvents attribute in binary content mode,
// as the Kafka protocol binding has it: "ce_" and the attribute's name, and
// datacontenttype as content-type.
func (d *Driver) EventHeader(attr string) string { return eventHeader(attr) }

func eventHeader(attr string) string {
	if attr == "datacontenttype" {
		return "content-type"
	}
	return "ce_" + attr
}
