package fakeplugin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/internal/workload/podresources"
)

// manifestPath is the DaemonSet template the local cluster code renders; the test lives here because
// the template's flags must match this package's binary.
var manifestPath = filepath.Join("..", "..", "infra", "localcluster", "manifests", "fake-device-plugin.yaml")

// manifestValues mirrors the struct the local-cluster renderer passes (same field names and types).
type manifestValues struct {
	Image         string
	Devices       int
	ResourceName  string
	Replicas      int
	Sharing       string
	RenameShared  bool
	DriverVersion string
	UpgradeTo     string
	PluginVersion string
	// PluginUpgradeTo is the canary agent's rolling-upgrade target.
	PluginUpgradeTo string
	Fault           string
	DRADevices      int
	DriverName      string
	// ExtendedResource is what the DeviceClass maps (spec.extendedResourceName); "" none.
	ExtendedResource string
	// Agents are the DaemonSets (localcluster.AgentDaemonSet's fields).
	Agents []agentValues
}

type agentValues struct {
	Name, Agent, Pools string
	Surge              bool
}

// localAgents are the local cluster's two agent DaemonSets (localcluster GPUStackOptions.Agents).
var localAgents = []agentValues{{Name: "fake-device-plugin", Pools: `"gpu"`}, {Name: "fake-device-plugin-canary", Agent: "canary", Pools: `"canary"`, Surge: true}}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

func renderManifest(t *testing.T, v manifestValues) []*unstructured.Unstructured {
	t.Helper()
	src, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("fake-device-plugin").Option("missingkey=error").Parse(string(src))
	if err != nil {
		t.Fatalf("parse template: %v", err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, v); err != nil {
		t.Fatalf("render template: %v", err)
	}
	var objs []*unstructured.Unstructured
	for i, doc := range docSeparator.Split(out.String(), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("document %d is not valid YAML: %v\n%s", i, err, doc)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			t.Fatalf("document %d lacks apiVersion/kind/name:\n%s", i, doc)
		}
		// Strict decoding into the typed object catches misspelt or misplaced fields, which the API
		// server would silently drop.
		var typed any
		switch u.GetKind() {
		case "Namespace":
			typed = &corev1.Namespace{}
		case "ServiceAccount":
			typed = &corev1.ServiceAccount{}
		case "ClusterRole":
			typed = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			typed = &rbacv1.ClusterRoleBinding{}
		case "DaemonSet":
			typed = &appsv1.DaemonSet{}
		case "Service":
			typed = &corev1.Service{}
		case "DeviceClass":
			typed = &resourcev1.DeviceClass{}
		default:
			t.Fatalf("unexpected kind %s in manifest", u.GetKind())
		}
		if err := yaml.UnmarshalStrict([]byte(doc), typed); err != nil {
			t.Fatalf("%s %s does not decode strictly: %v", u.GetKind(), u.GetName(), err)
		}
		objs = append(objs, u)
	}
	return objs
}

func stripComments(doc string) string {
	var keep []string
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

func daemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == "DaemonSet" {
			ds := &appsv1.DaemonSet{}
			b, _ := yaml.Marshal(u.Object)
			if err := yaml.UnmarshalStrict(b, ds); err != nil {
				t.Fatal(err)
			}
			return ds
		}
	}
	t.Fatal("no DaemonSet in manifest")
	return nil
}

func service(t *testing.T, objs []*unstructured.Unstructured) *corev1.Service {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == "Service" {
			svc := &corev1.Service{}
			b, _ := yaml.Marshal(u.Object)
			if err := yaml.UnmarshalStrict(b, svc); err != nil {
				t.Fatal(err)
			}
			return svc
		}
	}
	t.Fatal("no Service in manifest")
	return nil
}

func TestManifestTemplateRendersValidObjects(t *testing.T) {
	v := manifestValues{Image: "gpuconform/fake-device-plugin:dev", Devices: 8, ResourceName: "nvidia.com/gpu",
		Replicas: 2, DriverVersion: "550.54.15", UpgradeTo: "560.35.03", PluginVersion: "v2", PluginUpgradeTo: "v3", DRADevices: 4, DriverName: "gpu.nvidia.com", Agents: localAgents}
	objs := renderManifest(t, v)

	var kinds []string
	for _, u := range objs {
		kinds = append(kinds, u.GetKind())
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service", "DeviceClass"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("manifest lacks a %s (has %v)", k, kinds)
		}
	}

	ds := daemonSet(t, objs)
	if ds.Namespace != "gpuconform-system" || ds.Name != "fake-device-plugin" {
		t.Errorf("DaemonSet is %s/%s, want gpuconform-system/fake-device-plugin", ds.Namespace, ds.Name)
	}
	if got := ds.Annotations["gpuconform.io/fake-driver-upgrade-to"]; got != v.UpgradeTo {
		t.Errorf("upgrade-target annotation = %q, want %q", got, v.UpgradeTo)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Image != v.Image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
	}
	wantArgs := []string{"--devices=8", "--resource-name=nvidia.com/gpu", "--replicas=2",
		"--driver-version=550.54.15", "--version=v2", "--ready-file=/run/fake-device-plugin/serving", "--ready-address=:9401",
		"--dra-devices=4", "--dra-driver-name=gpu.nvidia.com", "--state-dir=/run/gpuconform-fake-gpu", "--cdi-dir=/var/run/cdi",
		"--nvidia-smi=/opt/gpuconform/nvidia-smi", "--metrics-address=" + DefaultMetricsAddress,
		"--pod-resources-socket=" + podresources.DefaultSocket}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args = %v, want %v (no --fault when Fault is empty)", c.Args, wantArgs)
	}
	// The DeviceClass maps the extended resource to the agent's DRA GPUs only when asked to, as a valid
	// resource.k8s.io/v1 field.
	mapped := v
	mapped.ExtendedResource = "nvidia.com/gpu"
	for _, vals := range []manifestValues{v, mapped} {
		for _, u := range renderManifest(t, vals) {
			if u.GetKind() != "DeviceClass" || u.GetName() != "gpu.nvidia.com" {
				continue
			}
			got, _, _ := unstructured.NestedString(u.Object, "spec", "extendedResourceName")
			if got != vals.ExtendedResource {
				t.Errorf("DeviceClass extendedResourceName %q, want %q", got, vals.ExtendedResource)
			}
		}
	}
	// renameByDefault reaches the agent as --rename-shared, and only then.
	renamed := v
	renamed.RenameShared = true
	for _, u := range renderManifest(t, renamed) {
		if u.GetKind() == "DaemonSet" && !strings.Contains(fmt.Sprint(u.Object), "--rename-shared") {
			t.Errorf("RenameShared does not reach the agent's arguments")
		}
	}
	// The readiness probe asks the agent's readiness endpoint (--ready-address), which reads the very file
	// the plugin writes, on a volume that outlives the process; over HTTP, not exec (ready.go).
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != ReadyPath || p.HTTPGet.Port.IntValue() != 9401 || p.Exec != nil {
		t.Errorf("readiness probe does not ask the agent's readiness endpoint on :9401: %+v", c.ReadinessProbe)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/run/fake-device-plugin" }) {
		t.Errorf("no volume mounted at the ready file's directory: %+v", c.VolumeMounts)
	}
	if len(c.Env) != 2 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" ||
		c.Env[1].Name != "POD_UID" || c.Env[1].ValueFrom.FieldRef.FieldPath != "metadata.uid" {
		t.Errorf("NODE_NAME must come from spec.nodeName, POD_UID from metadata.uid: %+v", c.Env)
	}
	terms := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	expr := terms[0].MatchExpressions[0]
	if expr.Key != "gpuconform.io/pool" || expr.Operator != corev1.NodeSelectorOpIn || !slices.Equal(expr.Values, []string{"gpu"}) {
		t.Errorf("node affinity = %+v", expr)
	}
	if ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge != nil || ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("the GPU pool's agent rolls one node at a time without surge: %+v", ds.Spec.UpdateStrategy)
	}
	// The canary pool's agent: its own DaemonSet, selected apart from the GPU pool's, rolled with a surge so
	// that the DRA kubelet plugin's old and new instances overlap; its pods say their version.
	var canary *appsv1.DaemonSet
	for _, u := range objs {
		if u.GetKind() == "DaemonSet" && u.GetName() == "fake-device-plugin-canary" {
			canary = &appsv1.DaemonSet{}
			b, _ := yaml.Marshal(u.Object)
			if err := yaml.UnmarshalStrict(b, canary); err != nil {
				t.Fatal(err)
			}
		}
	}
	if canary == nil {
		t.Fatal("no DaemonSet fake-device-plugin-canary")
	}
	cterms := canary.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if got := cterms[0].MatchExpressions[0].Values; !slices.Equal(got, []string{"canary"}) {
		t.Errorf("canary agent runs on pools %v, want [canary]", got)
	}
	if canary.Spec.Selector.MatchLabels["gpuconform.io/agent"] != "canary" || canary.Spec.Template.Labels["gpuconform.io/agent"] != "canary" {
		t.Errorf("canary agent's selector %v and pod labels %v must carry gpuconform.io/agent=canary", canary.Spec.Selector.MatchLabels, canary.Spec.Template.Labels)
	}
	if ru := canary.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("canary agent must roll with maxSurge 1, maxUnavailable 0: %+v", canary.Spec.UpdateStrategy)
	}
	if got := canary.Annotations["gpuconform.io/fake-plugin-upgrade-to"]; got != v.PluginUpgradeTo || ds.Annotations["gpuconform.io/fake-plugin-upgrade-to"] != "" {
		t.Errorf("the canary agent declares its rolling-upgrade target %q (want %q), and only it", got, v.PluginUpgradeTo)
	}
	if got := canary.Spec.Template.Labels["app.kubernetes.io/version"]; got != v.PluginVersion {
		t.Errorf("canary agent's pods say version %q, want %q", got, v.PluginVersion)
	}
	if !slices.ContainsFunc(ds.Spec.Template.Spec.Volumes, func(vol corev1.Volume) bool {
		return vol.HostPath != nil && vol.HostPath.Path == "/var/lib/kubelet/device-plugins"
	}) {
		t.Errorf("device-plugins hostPath volume missing: %+v", ds.Spec.Template.Spec.Volumes)
	}
	// The DRA half and the fake driver need the kubelet's plugin directories, the CDI directory and the
	// state directory on the node at the paths the flags name.
	for _, path := range []string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi", "/run/gpuconform-fake-gpu"} {
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == path }) {
			t.Errorf("no volume mounted at %s: %+v", path, c.VolumeMounts)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("the agent makes device nodes and must run privileged: %+v", c.SecurityContext)
	}

	// The metrics: the agent's port named metrics, the kubelet's PodResources directory at the path the flag
	// names, and the Service through which the suite finds each node's exporter.
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 9400 }) {
		t.Errorf("the agent has no container port 9400 named metrics: %+v", c.Ports)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == filepath.Dir(podresources.DefaultSocket) }) {
		t.Errorf("no volume mounted at the PodResources socket's directory: %+v", c.VolumeMounts)
	}
	svc := service(t, objs)
	if svc.Namespace != "gpuconform-system" || svc.Name != "fake-dcgm-exporter" {
		t.Errorf("Service is %s/%s, want gpuconform-system/fake-dcgm-exporter", svc.Namespace, svc.Name)
	}
	if svc.Labels["app.kubernetes.io/name"] != "dcgm-exporter" || svc.Labels["app.kubernetes.io/part-of"] != "gpuconform" {
		t.Errorf("Service labels %v, want name dcgm-exporter and part-of gpuconform", svc.Labels)
	}
	if svc.Spec.Selector["app.kubernetes.io/name"] != "fake-device-plugin" {
		t.Errorf("Service selector %v, want app.kubernetes.io/name=fake-device-plugin", svc.Spec.Selector)
	}
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the agent pods' labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service must publish not-ready agents: their readiness follows the kubelet, not the metrics")
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].Port != 9400 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service ports %+v, want metrics 9400 → the agent's metrics port", svc.Spec.Ports)
	}

	// The MIG modes pass --sharing and add the class of partitions, which must decode strictly too.
	v.Sharing = "mig-mixed"
	objs = renderManifest(t, v)
	if c := daemonSet(t, objs).Spec.Template.Spec.Containers[0]; !slices.Contains(c.Args, "--sharing=mig-mixed") {
		t.Errorf("args in mig-mixed = %v, want --sharing=mig-mixed", c.Args)
	}
	var classes []string
	for _, u := range objs {
		if u.GetKind() == "DeviceClass" {
			classes = append(classes, u.GetName())
		}
	}
	if !slices.Equal(classes, []string{"gpu.nvidia.com", "mig.nvidia.com"}) {
		t.Errorf("DeviceClasses in mig-mixed = %v, want gpu.nvidia.com and mig.nvidia.com", classes)
	}
	v.Sharing = ""

	v.Fault = string(FaultWrongIDs)
	c = daemonSet(t, renderManifest(t, v)).Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--fault=wrong-ids") {
		t.Errorf("args with a fault = %v, want --fault=wrong-ids", c.Args)
	}
}
