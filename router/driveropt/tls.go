package driveropt

// TLS configures a driver's TLS client.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// Check reports settings that have no effect or no partner: a file or skipped
// verification while TLS is off, a certificate without its key.
func (t TLS) Check(c *Checker, key string) {
	if !t.Enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""},
			{"insecure_skip_verify", t.InsecureSkipVerify}} {
			if f.set {
				c.Add(key+"."+f.name, "set, but tls.enabled is false")
			}
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		c.Add(key+".cert_file", "cert_file and key_file go together; set both or neither")
	}
}
