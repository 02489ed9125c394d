package accelmetrics

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/config"
)

// exposition is what a DCGM exporter with its Kubernetes mapping on serves for a node with two GPUs, the
// first held by pod team/train.
const exposition = `# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100",Hostname="n1",container="main",namespace="team",pod="train"} 87
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100",Hostname="n1"} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100",Hostname="n1",container="main",namespace="team",pod="train"} 30000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100",Hostname="n1"} 0
`

func parse(t *testing.T, text string) []Sample {
	t.Helper()
	s, err := ParseText(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckFindsTheHeldDeviceAttributedToItsPod(t *testing.T) {
	f, err := Check(parse(t, exposition), Holder{Namespace: "team", Pod: "train", Node: "n1", Devices: []string{"GPU-a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Attributed || len(f.Samples) != 2 || !strings.Contains(f.Samples[0], `UUID="GPU-a"`) || !strings.Contains(f.Samples[0], `pod="train"`) {
		t.Errorf("finding = %+v", f)
	}
}

func TestCheckFailsAMissingDevice(t *testing.T) {
	var kept []string
	for l := range strings.SplitSeq(exposition, "\n") {
		if !strings.Contains(l, "GPU-a") {
			kept = append(kept, l)
		}
	}
	_, err := Check(parse(t, strings.Join(kept, "\n")), Holder{Namespace: "team", Pod: "train", Node: "n1", Devices: []string{"GPU-a"}})
	if err == nil || !strings.Contains(err.Error(), "device GPU-a held by pod team/train on n1 has no DCGM_FI_DEV_GPU_UTIL and no DCGM_FI_DEV_FB_USED sample") ||
		!strings.Contains(err.Error(), "devices it lists: GPU-b") {
		t.Errorf("err = %v", err)
	}
	// Memory without utilisation is not enough either.
	noUtil := strings.Replace(exposition, `DCGM_FI_DEV_GPU_UTIL{gpu="0"`, `DCGM_FI_DEV_SM_CLOCK{gpu="0"`, 1)
	if _, err := Check(parse(t, noUtil), Holder{Namespace: "team", Pod: "train", Devices: []string{"GPU-a"}}); err == nil || !strings.Contains(err.Error(), "no DCGM_FI_DEV_GPU_UTIL (or") {
		t.Errorf("no utilisation: err = %v", err)
	}
}

func TestCheckFailsAWrongAttribution(t *testing.T) {
	wrong := strings.ReplaceAll(exposition, `pod="train"`, `pod="train-x"`)
	_, err := Check(parse(t, wrong), Holder{Namespace: "team", Pod: "train", Devices: []string{"GPU-a"}})
	if err == nil || !strings.Contains(err.Error(), "device GPU-a held by pod team/train is attributed to team/train-x on the exporter, not to its holder") {
		t.Errorf("err = %v", err)
	}
	// A device the exporter attributes to nobody while it attributes others.
	two := exposition + `DCGM_FI_DEV_GPU_UTIL{UUID="GPU-c",namespace="x",pod="y"} 1` + "\n"
	_, err = Check(parse(t, two), Holder{Namespace: "team", Pod: "train", Devices: []string{"GPU-b"}})
	if err == nil || !strings.Contains(err.Error(), "attributed to no pod") {
		t.Errorf("unattributed device: err = %v", err)
	}
	// The old attribution label names count too.
	old := strings.NewReplacer(`namespace="team",pod="train"`, `pod_namespace="team",pod_name="train"`).Replace(exposition)
	if _, err := Check(parse(t, old), Holder{Namespace: "team", Pod: "train", Devices: []string{"GPU-a"}}); err != nil {
		t.Errorf("old label names: %v", err)
	}
}

func TestCheckWithoutAttributionChecksPresenceOnly(t *testing.T) {
	plain := strings.ReplaceAll(exposition, `,container="main",namespace="team",pod="train"`, "")
	f, err := Check(parse(t, plain), Holder{Namespace: "team", Pod: "train", Devices: []string{"GPU-a"}})
	if err != nil || f.Attributed {
		t.Errorf("finding %+v, err %v", f, err)
	}
	if _, err := Check(parse(t, plain), Holder{Namespace: "team", Pod: "train"}); err == nil {
		t.Error("a holder of no device passed: a check with nothing to check must not")
	}
}

func TestDiscover(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset()
	if e, why := Discover(ctx, kube, "auto"); e.Present() || !strings.Contains(why, "no Service is labelled app.kubernetes.io/name=dcgm-exporter or app=nvidia-dcgm-exporter") {
		t.Errorf("empty cluster: %+v, %q", e, why)
	}
	kube = fake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: "nvidia-dcgm-exporter", Labels: map[string]string{"app": "nvidia-dcgm-exporter"}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: "web", Labels: map[string]string{"app": "web"}}})
	e, why := Discover(ctx, kube, "")
	if why != "" || e.Kind != config.MetricsService || e.Namespace != "gpu-operator" || e.Name != "nvidia-dcgm-exporter" || !strings.Contains(e.String(), "auto: Service labelled app=nvidia-dcgm-exporter") {
		t.Errorf("GPU Operator's exporter: %+v, %q", e, why)
	}
	if e, why := Discover(ctx, kube, "none"); e.Present() || why == "" {
		t.Errorf("none: %+v, %q", e, why)
	}
	if e, _ := Discover(ctx, kube, "prometheus:http://prom:9090"); e.Kind != config.MetricsPrometheus || e.URL != "http://prom:9090" {
		t.Errorf("prometheus: %+v", e)
	}
}

func TestReadServiceWithoutAnExporterOnTheNodeIsTerminal(t *testing.T) {
	kube := fake.NewClientset(&discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: "x", Labels: map[string]string{discoveryv1.LabelServiceName: "dcgm"}},
		Ports:      []discoveryv1.EndpointPort{{Name: ptr.To("metrics"), Port: ptr.To[int32](9400)}},
		Endpoints: []discoveryv1.Endpoint{{NodeName: ptr.To("n2"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "dcgm-abc"}},
			{NodeName: ptr.To("n3"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "dcgm-def"}}},
	})
	_, err := Read(t.Context(), kube, Endpoint{Kind: config.MetricsService, Namespace: "gpu-operator", Name: "dcgm"}, "n1")
	if !errors.Is(err, ErrTerminal) || !strings.Contains(err.Error(), "no pod of Service gpu-operator/dcgm runs on node n1 (its endpoints are on: n2, n3)") {
		t.Errorf("err = %v", err)
	}
}

func TestReadPrometheus(t *testing.T) {
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		query = r.Form.Get("query")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[` +
			`{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","UUID":"GPU-a","Hostname":"n1","pod":"train","namespace":"team"},"value":[1700000000,"87"]},` +
			`{"metric":{"__name__":"DCGM_FI_DEV_FB_USED","UUID":"GPU-a","Hostname":"n1","pod":"train","namespace":"team"},"value":[1700000000,"30000"]}]}}`))
	}))
	defer srv.Close()
	s, err := Read(t.Context(), nil, Endpoint{Kind: config.MetricsPrometheus, URL: srv.URL}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(query, `Hostname="n1"`) || !strings.Contains(query, GPUUtil) {
		t.Errorf("query = %q", query)
	}
	if _, err := Check(s.Samples, Holder{Namespace: "team", Pod: "train", Node: "n1", Devices: []string{"GPU-a"}}); err != nil {
		t.Errorf("check of Prometheus samples: %v (%v)", err, s.Samples)
	}
}
