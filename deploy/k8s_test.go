package deploy_test

import (
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router/drivers"
)

// The subset of Kubernetes objects these tests read.
type (
	object struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Replicas *int      `yaml:"replicas"`
			Selector *selector `yaml:"selector"`
			Template *struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
			MaxUnavailable any `yaml:"maxUnavailable"` // PodDisruptionBudget
			MinAvailable   any `yaml:"minAvailable"`
			Ports          []struct {
				Port       int `yaml:"port"`
				TargetPort any `yaml:"targetPort"`
			} `yaml:"ports"` // Service
		} `yaml:"spec"`
		Data       map[string]string `yaml:"data"`       // ConfigMap
		StringData map[string]string `yaml:"stringData"` // Secret
		Resources  []string          `yaml:"resources"`  // Kustomization
	}
	// selector is a label selector; a Service's selector is a plain map and lands in
	// MatchLabels through UnmarshalYAML.
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	podSpec struct {
		EnableServiceLinks *bool        `yaml:"enableServiceLinks"`
		SecurityContext    *podSecurity `yaml:"securityContext"`
		InitContainers     []container  `yaml:"initContainers"`
		Containers         []container  `yaml:"containers"`
		Volumes            []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	}
	podSecurity struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	}
	container struct {
		Name          string   `yaml:"name"`
		Image         string   `yaml:"image"`
		Args          []string `yaml:"args"`
		RestartPolicy string   `yaml:"restartPolicy"`
		Env           []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				SecretKeyRef *struct {
					Name     string `yaml:"name"`
					Key      string `yaml:"key"`
					Optional bool   `yaml:"optional"`
				} `yaml:"secretKeyRef"`
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports          []containerPort `yaml:"ports"`
		ReadinessProbe *probe          `yaml:"readinessProbe"`
		LivenessProbe  *probe          `yaml:"livenessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext *struct {
			RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
			RunAsUser                *int  `yaml:"runAsUser"`
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	containerPort struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
	}
)

func (s *selector) UnmarshalYAML(n *yaml.Node) error {
	var withMatch struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	if err := n.Decode(&withMatch); err == nil && withMatch.MatchLabels != nil {
		s.MatchLabels = withMatch.MatchLabels
		return nil
	}
	return n.Decode(&s.MatchLabels)
}

// manifests reads every document of every YAML file under k8s/, by file.
func manifests(t *testing.T) map[string][]object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under k8s/ (%v)", err)
	}
	out := map[string][]object{}
	for _, f := range files {
		out[filepath.Base(f)] = decodeYAML[object](t, f)
	}
	return out
}

// find returns the one object of kind named name in docs.
func find(t *testing.T, docs []object, kind, name string) object {
	t.Helper()
	for _, d := range docs {
		if d.Kind == kind && d.Metadata.Name == name {
			return d
		}
	}
	t.Fatalf("no %s %q", kind, name)
	return object{}
}

// outboxdContainer returns the pod's outboxd container: a regular container, or a
// native sidecar (an init container that restarts always).
func outboxdContainer(t *testing.T, p podSpec) container {
	t.Helper()
	for _, c := range p.Containers {
		if c.Name == "outboxd" {
			return c
		}
	}
	for _, c := range p.InitContainers {
		if c.Name == "outboxd" && c.RestartPolicy == "Always" {
			return c
		}
	}
	t.Fatal("pod has no outboxd container")
	return container{}
}

// probePort resolves a probe's port, a number or the name of a container port.
func probePort(c container, port any) int {
	switch p := port.(type) {
	case int:
		return p
	case string:
		for _, cp := range c.Ports {
			if cp.Name == p {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// checkOutboxdPod holds a pod running outboxd to what the admin API and the
// configuration need, and returns the configuration file and environment it runs with.
func checkOutboxdPod(t *testing.T, what string, p podSpec, configMaps map[string]object, secrets map[string]object) (file string, environ []string) {
	t.Helper()
	c := outboxdContainer(t, p)
	for _, pr := range []struct {
		kind  string
		probe *probe
		path  string
	}{{"readiness", c.ReadinessProbe, readyz}, {"liveness", c.LivenessProbe, healthz}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", what, pr.kind)
			continue
		}
		if got := pr.probe.HTTPGet; got.Path != pr.path || probePort(c, got.Port) != adminPort {
			t.Errorf("%s: %s probe GET %s on port %v, want %s on %d", what, pr.kind, got.Path, got.Port, pr.path, adminPort)
		}
	}
	if !slices.ContainsFunc(c.Ports, func(p containerPort) bool { return p.ContainerPort == adminPort }) {
		t.Errorf("%s: outboxd does not declare container port %d", what, adminPort)
	}

	nonRoot := p.SecurityContext != nil && p.SecurityContext.RunAsNonRoot != nil && *p.SecurityContext.RunAsNonRoot
	sc := c.SecurityContext
	if sc != nil && sc.RunAsNonRoot != nil {
		nonRoot = *sc.RunAsNonRoot
	}
	if !nonRoot || sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: outboxd must run as non-root on a read-only root file system, without privilege escalation or capabilities", what)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("%s: outboxd resources %+v, want cpu and memory requests and a memory limit", what, c.Resources)
	}
	if p.EnableServiceLinks == nil || *p.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks is not false: a Service named outboxd… would add OUTBOXD_* variables outboxd refuses", what)
	}

	// The configuration: --config names a file from a mounted ConfigMap; variables come
	// from values, secrets (the example's values) and the pod's name.
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("%s: outboxd args %q name no --config file", what, c.Args)
	}
	cfgPath := c.Args[i+1]
	for _, m := range c.VolumeMounts {
		if path.Dir(cfgPath) != m.MountPath {
			continue
		}
		for _, v := range p.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm, ok := configMaps[v.ConfigMap.Name]
				if !ok {
					t.Fatalf("%s: ConfigMap %s is not among the manifests", what, v.ConfigMap.Name)
				}
				file = cm.Data[path.Base(cfgPath)]
			}
		}
	}
	if file == "" {
		t.Fatalf("%s: --config %s is not a key of a mounted ConfigMap", what, cfgPath)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			environ = append(environ, e.Name+"="+e.Value)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := secrets[ref.Name]
			if !ok {
				t.Errorf("%s: %s comes from Secret %s, of which there is no example", what, e.Name, ref.Name)
				continue
			}
			v, ok := s.StringData[ref.Key]
			if !ok && !ref.Optional {
				t.Errorf("%s: %s comes from key %s, which the example Secret %s lacks", what, e.Name, ref.Key, ref.Name)
			}
			environ = append(environ, e.Name+"="+v)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			environ = append(environ, e.Name+"=outboxd-5d8f7c9b4-x2x7q")
		default:
			t.Errorf("%s: cannot tell what %s holds", what, e.Name)
		}
	}
	return file, environ
}

// byKind indexes every document by kind and name.
func byKind(all map[string][]object, kind string) map[string]object {
	out := map[string]object{}
	for _, docs := range all {
		for _, d := range docs {
			if d.Kind == kind {
				out[d.Metadata.Name] = d
			}
		}
	}
	return out
}

func TestEveryManifestParsesAndNamesItsObject(t *testing.T) {
	t.Parallel()
	for file, docs := range manifests(t) {
		if len(docs) == 0 {
			t.Errorf("%s holds no document", file)
		}
		for i, d := range docs {
			if d.APIVersion == "" || d.Kind == "" || (d.Metadata.Name == "" && d.Kind != "Kustomization") {
				t.Errorf("%s document %d: apiVersion %q kind %q name %q, want all three", file, i+1, d.APIVersion, d.Kind, d.Metadata.Name)
			}
		}
	}
}

func TestTheKustomizationAppliesTheReplicaSetUpAndNothingElse(t *testing.T) {
	t.Parallel()
	all := manifests(t)
	k := all["kustomization.yaml"]
	if len(k) != 1 || k[0].Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml holds %v, want one Kustomization", k)
	}
	// Applied by hand, each for its own reason: the Secret holds real credentials, the
	// migration runs before a rollout, the sidecar is the other way to deploy.
	standalone := []string{"kustomization.yaml", "secret.example.yaml", "migrate-job.yaml", "sidecar-example.yaml"}
	var want []string
	for f := range all {
		if !slices.Contains(standalone, f) {
			want = append(want, f)
		}
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(k[0].Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %q, want %q", got, want)
	}
}

// TestKubectlBuildsTheKustomization runs a real build of the kustomization where kubectl
// is installed; the resource list itself is checked by
// TestTheKustomizationAppliesTheReplicaSetUpAndNothingElse.
func TestKubectlBuildsTheKustomization(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed: the kustomization was not built, nothing checked here")
	}
	out, err := exec.Command(kubectl, "kustomize", "k8s").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize k8s: %v\n%s", err, out)
	}
	kinds := map[string]bool{}
	for _, part := range strings.Split(string(out), "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(part), &o); err != nil {
			t.Fatalf("kubectl kustomize output: %v", err)
		}
		kinds[o.Kind] = true
		if o.Kind == "Deployment" {
			if c := outboxdContainer(t, o.Spec.Template.Spec); !strings.Contains(c.Image, "/") {
				t.Errorf("kustomized image %q: the images: override did not apply", c.Image)
			}
		}
	}
	for _, k := range []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"} {
		if !kinds[k] {
			t.Errorf("kubectl kustomize k8s yields no %s (kinds %v)", k, slices.Sorted(maps.Keys(kinds)))
		}
	}
}

func TestReplicasDeploymentProbesTheAdminAPIAndRunsAValidConfiguration(t *testing.T) {
	t.Parallel()
	all := manifests(t)
	d := find(t, all["deployment.yaml"], "Deployment", "outboxd")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", d.Spec.Replicas)
	}
	pod := d.Spec.Template
	if d.Spec.Selector == nil || !subset(d.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Fatalf("the Deployment's selector does not select its own pods")
	}
	file, environ := checkOutboxdPod(t, "deployment.yaml", pod.Spec, byKind(all, "ConfigMap"), byKind(all, "Secret"))
	cfg := loadConfig(t, file, environ)
	checkAdminAddr(t, "deployment.yaml", cfg.HTTP.Addr)
	if cfg.ReplicaID != "outboxd-5d8f7c9b4-x2x7q" {
		t.Errorf("replica id %q, want the pod's name: every replica needs its own", cfg.ReplicaID)
	}
	if cfg.DatabaseURL == "" || strings.Contains(file, "postgres://") {
		t.Error("the database URL must come from the Secret, not the ConfigMap")
	}

	pdb := find(t, all["poddisruptionbudget.yaml"], "PodDisruptionBudget", "outboxd")
	if pdb.Spec.Selector == nil || !slices.Equal(slices.Sorted(maps.Keys(pdb.Spec.Selector.MatchLabels)), slices.Sorted(maps.Keys(d.Spec.Selector.MatchLabels))) ||
		!subset(pdb.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("PodDisruptionBudget selects %v, want the Deployment's pods %v", pdb.Spec.Selector, d.Spec.Selector.MatchLabels)
	}
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}

	svc := find(t, all["service.yaml"], "Service", "outboxd-metrics")
	if svc.Spec.Selector == nil || !subset(svc.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("Service selects %v, not the Deployment's pods %v", svc.Spec.Selector, pod.Metadata.Labels)
	}
	c := outboxdContainer(t, pod.Spec)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != adminPort || probePort(c, svc.Spec.Ports[0].TargetPort) != adminPort {
		t.Errorf("Service ports %+v, want %d to the admin API", svc.Spec.Ports, adminPort)
	}
}

func TestTheMigrationJobRunsMigrateUpWithTheReplicasConfiguration(t *testing.T) {
	t.Parallel()
	all := manifests(t)
	j := find(t, all["migrate-job.yaml"], "Job", "outboxd-migrate")
	c := j.Spec.Template.Spec.Containers
	if len(c) != 1 || len(c[0].Args) < 2 || c[0].Args[0] != "migrate" || c[0].Args[1] != "up" {
		t.Fatalf("migration Job containers %+v, want one running migrate up", c)
	}
	if sc := j.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the migration Job does not run as non-root")
	}
	d := find(t, all["deployment.yaml"], "Deployment", "outboxd")
	jobVolumes, deployVolumes := j.Spec.Template.Spec.Volumes, d.Spec.Template.Spec.Volumes
	if len(jobVolumes) != 1 || len(deployVolumes) != 1 || jobVolumes[0].ConfigMap == nil || deployVolumes[0].ConfigMap == nil ||
		jobVolumes[0].ConfigMap.Name != deployVolumes[0].ConfigMap.Name {
		t.Error("the migration Job does not read the replicas' ConfigMap: it could migrate another table")
	}
}

func TestTheSidecarExampleRunsOutboxdBesideTheApplication(t *testing.T) {
	t.Parallel()
	all := manifests(t)
	docs := all["sidecar-example.yaml"]
	d := find(t, docs, "Deployment", "shop")
	pod := d.Spec.Template.Spec
	outboxd := outboxdContainer(t, pod)
	var app []string
	for _, c := range pod.Containers {
		if c.Name != outboxd.Name {
			app = append(app, c.Name)
		}
	}
	if len(app) == 0 {
		t.Fatal("the sidecar example's pod has no application container")
	}
	secrets := map[string]object{"shop-outboxd": {StringData: map[string]string{"database-url": "postgres://shop:pw@db:5432/shop"}}}
	file, environ := checkOutboxdPod(t, "sidecar-example.yaml", pod, byKind(map[string][]object{"": docs}, "ConfigMap"), secrets)
	cfg := loadConfig(t, file, environ)
	checkAdminAddr(t, "sidecar-example.yaml", cfg.HTTP.Addr)
	if len(cfg.Streams) == 0 {
		t.Error("the sidecar's configuration has no stream")
	}
}

// subset reports whether every label of sel is in labels with the same value.
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestSecretExampleHoldsNoRealLookingPassword(t *testing.T) {
	t.Parallel()
	s := find(t, manifests(t)["secret.example.yaml"], "Secret", "outboxd")
	for k, v := range s.StringData {
		if !strings.Contains(v, "change-me") {
			t.Errorf("secret.example.yaml %s = %q: an example must say change-me, not look usable", k, v)
		}
	}
	if _, err := os.Stat(filepath.Join("k8s", "secret.yaml")); err == nil {
		t.Error("k8s/secret.yaml exists: real secrets do not belong in the repository")
	}
}

// TestServiceLinksWouldStopOutboxd shows why every pod running outboxd turns service
// links off: Kubernetes would give it variables named after each Service in the
// namespace, ours included, and outboxd refuses the OUTBOXD_* ones it does not know.
func TestServiceLinksWouldStopOutboxd(t *testing.T) {
	t.Parallel()
	for name := range byKind(manifests(t), "Service") {
		prefix := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if !strings.HasPrefix(prefix, "OUTBOXD_") {
			continue
		}
		links := []string{
			prefix + "_SERVICE_HOST=10.0.0.7",
			prefix + "_SERVICE_PORT=9600",
			prefix + "_PORT=tcp://10.0.0.7:9600",
			prefix + "_PORT_9600_TCP_ADDR=10.0.0.7",
		}
		if _, err := config.Load("", append(links, "OUTBOXD_STREAMS__S__DRIVER=d", "OUTBOXD_DRIVERS__D__TYPE=discard"), drivers.All()); err == nil {
			t.Errorf("outboxd accepts the service links of %s: enableServiceLinks: false may be dropped", name)
		}
	}
}
