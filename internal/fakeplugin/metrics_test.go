package fakeplugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/syncbuf"
)

// fakePodResources is the kubelet's PodResources List endpoint, answering with the pods a test sets.
type fakePodResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	mu   sync.Mutex
	pods []*podresourcesv1.PodResources
}

func (f *fakePodResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &podresourcesv1.ListPodResourcesResponse{PodResources: f.pods}, nil
}

func (f *fakePodResources) set(pods ...*podresourcesv1.PodResources) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

// servePodResources serves a fake PodResources API on socket (its directory must exist) until the test ends.
func servePodResources(t *testing.T, socket string) *fakePodResources {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePodResources{}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return f
}

// dpPod is a pod whose one container holds ids of resource through the device plugin.
func dpPod(namespace, name, container, resource string, ids ...string) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: []*podresourcesv1.ContainerResources{{
		Name: container, Devices: []*podresourcesv1.ContainerDevices{{ResourceName: resource, DeviceIds: ids}},
	}}}
}

// draPod is a pod whose one container, "main", holds DRA devices of driver in pool through one claim.
func draPod(namespace, name, driver, pool string, devices ...string) *podresourcesv1.PodResources {
	var res []*podresourcesv1.ClaimResource
	for _, d := range devices {
		res = append(res, &podresourcesv1.ClaimResource{DriverName: driver, PoolName: pool, DeviceName: d})
	}
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: []*podresourcesv1.ContainerResources{{
		Name: "main", DynamicResources: []*podresourcesv1.DynamicResource{{ClaimName: name + "-gpu", ClaimNamespace: namespace, ClaimResources: res}},
	}}}
}

// metricsConfig is a test config of devices device-plugin and dra DRA GPUs whose scrapes ask the kubelet at
// dir/kubelet.sock (nothing serves it until a test starts servePodResources there).
func metricsConfig(t *testing.T, devices, dra int) (Config, string) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	cfg.Devices, cfg.DRADevices = devices, dra
	cfg.PodResourcesSocket = filepath.Join(dir, "kubelet.sock")
	return cfg, cfg.PodResourcesSocket
}

// scrape fetches the handler's samples in the Prometheus text format and parses them.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, MetricsPath, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", MetricsPath, rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q, want the text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("the endpoint's output does not parse: %v", err)
	}
	return fams
}

// sample is one parsed sample: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// samplesOf lists the samples of metric name, failing the test when the family is absent or not a gauge.
func samplesOf(t *testing.T, fams map[string]*dto.MetricFamily, name string) []sample {
	t.Helper()
	fam, ok := fams[name]
	if !ok {
		t.Fatalf("no %s in the scrape (has %v)", name, slices.Sorted(maps.Keys(fams)))
	}
	if fam.GetType() != dto.MetricType_GAUGE {
		t.Fatalf("%s is a %s, want a gauge", name, fam.GetType())
	}
	var out []sample
	for _, m := range fam.GetMetric() {
		s := sample{labels: map[string]string{}, value: m.GetGauge().GetValue()}
		for _, lp := range m.GetLabel() {
			s.labels[lp.GetName()] = lp.GetValue()
		}
		out = append(out, s)
	}
	return out
}

// ofGPU are the samples of GPU index among ss.
func ofGPU(ss []sample, index int) []sample {
	var out []sample
	for _, s := range ss {
		if s.labels[MetricLabelGPU] == strconv.Itoa(index) {
			out = append(out, s)
		}
	}
	return out
}

// holderOf is the pod/namespace/container a sample is attributed to ("" when it carries none of them).
func holderOf(s sample) string {
	if s.labels[MetricLabelPod]+s.labels[MetricLabelNamespace]+s.labels[MetricLabelContainer] == "" {
		return ""
	}
	return s.labels[MetricLabelNamespace] + "/" + s.labels[MetricLabelPod] + "/" + s.labels[MetricLabelContainer]
}

// holdersOf are the holders of GPU index in every family, sorted; each family must agree with the first.
func holdersOf(t *testing.T, fams map[string]*dto.MetricFamily, index int) []string {
	t.Helper()
	var first []string
	for k, g := range gpuGauges() {
		var got []string
		for _, s := range ofGPU(samplesOf(t, fams, g.name), index) {
			got = append(got, holderOf(s))
		}
		slices.Sort(got)
		if k == 0 {
			first = got
		} else if !slices.Equal(got, first) {
			t.Errorf("GPU %d: %s has holders %q, %s has %q", index, g.name, got, gpuGauges()[0].name, first)
		}
	}
	return first
}

// Every GPU of the node, device-plugin and DRA alike, has every gauge once, with exactly dcgm-exporter's
// labels and the fake's honest values; with no kubelet to ask, no sample names a pod.
func TestMetricsExposeEveryGPUWithTheExporterLabels(t *testing.T) {
	cfg, _ := metricsConfig(t, 2, 2)
	p := mustNew(t, cfg)
	fams := scrape(t, p.metricsHandler())

	if len(fams) != len(gpuGauges()) {
		t.Errorf("families %v, want exactly the %d GPU gauges", slices.Sorted(maps.Keys(fams)), len(gpuGauges()))
	}
	uuids := p.PhysicalUUIDs()
	for _, name := range []string{MetricGPUUtil, MetricMemCopyUtil, MetricFBUsed, MetricFBFree, MetricGPUTemp, MetricPowerUsage} {
		ss := samplesOf(t, fams, name)
		if len(ss) != 4 {
			t.Errorf("%s has %d samples, want one per GPU of both paths (4)", name, len(ss))
		}
		for i := range 4 {
			got := ofGPU(ss, i)
			if len(got) != 1 {
				t.Errorf("%s: %d samples of GPU %d, want 1", name, len(got), i)
				continue
			}
			want := map[string]string{
				MetricLabelGPU: strconv.Itoa(i), MetricLabelUUID: uuids[i], MetricLabelPCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i),
				MetricLabelDevice: "nvidia" + strconv.Itoa(i), MetricLabelModelName: cfg.Product, MetricLabelHostname: "node-a",
				MetricLabelDriverVersion: cfg.DriverVersion,
			}
			if !maps.Equal(got[0].labels, want) {
				t.Errorf("%s of GPU %d has labels %v, want exactly %v", name, i, got[0].labels, want)
			}
			var value float64
			switch name {
			case MetricFBFree:
				value = float64(cfg.MemoryMiB)
			case MetricGPUTemp:
				value = idleTemperatureC
			case MetricPowerUsage:
				value = idlePowerW
			}
			if got[0].value != value {
				t.Errorf("%s of GPU %d = %v, want %v", name, i, got[0].value, value)
			}
		}
	}

	// The driver version is the driver's (what nvidia-smi prints), so it follows driver-mismatch.
	p.SetFaultsFromAnnotation(string(FaultDriverMismatch))
	for _, s := range samplesOf(t, scrape(t, p.metricsHandler()), MetricFBFree) {
		if got, want := s.labels[MetricLabelDriverVersion], MismatchedDriverVersion(cfg.DriverVersion); got != want {
			t.Errorf("under driver-mismatch GPU %s reports driver %s, want the driver's %s", s.labels[MetricLabelGPU], got, want)
		}
	}
}

// A GPU held through the device plugin carries its holder's pod, namespace and container, whatever ID the
// kubelet recorded (the UUID, a replica ID, a MIG device's UUID); a GPU shared by several containers has
// one sample set per holder; a container holding two replicas of one GPU counts once; another resource's
// devices and unheld GPUs carry no holder.
func TestMetricsAttributeDevicePluginGPUsToTheirPods(t *testing.T) {
	t.Run("whole GPUs", func(t *testing.T) {
		cfg, socket := metricsConfig(t, 3, 0)
		p := mustNew(t, cfg)
		u := p.PhysicalUUIDs()
		servePodResources(t, socket).set(
			dpPod("team-a", "train", "worker", "nvidia.com/gpu", u[1], u[2]),
			dpPod("team-b", "fpga", "main", "example.com/fpga", u[0]),
			&podresourcesv1.PodResources{Namespace: "kube-system", Name: "coredns", Containers: []*podresourcesv1.ContainerResources{{Name: "coredns"}}},
		)
		fams := scrape(t, p.metricsHandler())
		for i, want := range [][]string{{""}, {"team-a/train/worker"}, {"team-a/train/worker"}} {
			if got := holdersOf(t, fams, i); !slices.Equal(got, want) {
				t.Errorf("GPU %d attributed to %q, want %q", i, got, want)
			}
		}
	})
	t.Run("time-slicing replicas", func(t *testing.T) {
		cfg, socket := metricsConfig(t, 2, 0)
		cfg.Replicas = 2
		p := mustNew(t, cfg)
		u := p.PhysicalUUIDs()
		servePodResources(t, socket).set(
			dpPod("team-a", "train", "worker", "nvidia.com/gpu", ReplicaID(u[0], 0), ReplicaID(u[0], 1)),
			dpPod("team-b", "infer", "main", "nvidia.com/gpu", ReplicaID(u[1], 1)),
			dpPod("team-c", "share", "main", "nvidia.com/gpu", ReplicaID(u[1], 0)),
		)
		fams := scrape(t, p.metricsHandler())
		if got, want := holdersOf(t, fams, 0), []string{"team-a/train/worker"}; !slices.Equal(got, want) {
			t.Errorf("GPU 0, both replicas in one container: attributed to %q, want %q once", got, want)
		}
		if got, want := holdersOf(t, fams, 1), []string{"team-b/infer/main", "team-c/share/main"}; !slices.Equal(got, want) {
			t.Errorf("GPU 1, shared by two pods: attributed to %q, want one sample set each: %q", got, want)
		}
		for _, s := range ofGPU(samplesOf(t, fams, MetricFBFree), 1) {
			if s.value != float64(cfg.MemoryMiB) || s.labels[MetricLabelUUID] != u[1] {
				t.Errorf("a holder's copy of GPU 1 must keep its identity and value: %v %v", s.labels, s.value)
			}
		}
	})
	t.Run("MIG devices", func(t *testing.T) {
		cfg, socket := metricsConfig(t, 4, 0)
		cfg.Sharing = fakegpu.SharingMIGMixed
		p := mustNew(t, cfg)
		mig := p.Resources()[1] // the first MIG profile's resource
		id := p.ResourceDeviceIDs(mig)[0]
		parent, ok := p.table.parentOf(id)
		if !ok {
			t.Fatalf("MIG device %s has no parent", id)
		}
		servePodResources(t, socket).set(dpPod("team-a", "mig", "main", mig, id))
		fams := scrape(t, p.metricsHandler())
		for i := range 4 {
			want := []string{""}
			if i == parent {
				want = []string{"team-a/mig/main"}
			}
			if got := holdersOf(t, fams, i); !slices.Equal(got, want) {
				t.Errorf("GPU %d attributed to %q, want %q (MIG device %s of %s is on GPU %d)", i, got, want, id, mig, parent)
			}
		}
	})
}

// A GPU held through DRA carries its holder when the device is the agent's (its driver, this node's pool),
// as a whole GPU or, in the MIG modes, as a partition of it; another node's or another driver's device of
// the same name attributes nothing.
func TestMetricsAttributeDRAGPUsToTheirPods(t *testing.T) {
	t.Run("whole GPUs", func(t *testing.T) {
		cfg, socket := metricsConfig(t, 2, 2)
		p := mustNew(t, cfg)
		servePodResources(t, socket).set(
			draPod("team-a", "dra", cfg.DRADriverName, "node-a", DRADeviceName(3)),
			draPod("team-b", "elsewhere", cfg.DRADriverName, "node-b", DRADeviceName(2)),
			draPod("team-c", "example", "gpu.example.com", "node-a", DRADeviceName(2)),
			draPod("team-d", "phantom", cfg.DRADriverName, "node-a", DRADeviceName(4)),
		)
		fams := scrape(t, p.metricsHandler())
		for i, want := range [][]string{{""}, {""}, {""}, {"team-a/dra/main"}} {
			if got := holdersOf(t, fams, i); !slices.Equal(got, want) {
				t.Errorf("GPU %d attributed to %q, want %q", i, got, want)
			}
		}
	})
	t.Run("MIG partitions", func(t *testing.T) {
		cfg, socket := metricsConfig(t, 1, 2)
		cfg.Sharing = fakegpu.SharingMIGSingle
		p := mustNew(t, cfg)
		part := DRAPartitionName(2, PartitionPlacements()[0])
		servePodResources(t, socket).set(draPod("team-a", "part", cfg.DRADriverName, "node-a", part))
		fams := scrape(t, p.metricsHandler())
		for i, want := range [][]string{{""}, {""}, {"team-a/part/main"}} {
			if got := holdersOf(t, fams, i); !slices.Equal(got, want) {
				t.Errorf("GPU %d attributed to %q, want %q (partition %s is on GPU 2)", i, got, want, part)
			}
		}
	})
}

// metrics-missing-device leaves out every sample of each holding pod's lowest-indexed GPU, and only those; switched
// off at run time, the GPU is back. With no GPU held there is nothing to leave out.
func TestMetricsMissingDeviceFault(t *testing.T) {
	cfg, socket := metricsConfig(t, 2, 2)
	p := mustNew(t, cfg)
	kubelet := servePodResources(t, socket)
	h := p.metricsHandler()
	u := p.PhysicalUUIDs()

	p.SetFaultsFromAnnotation(string(FaultMetricsMissingDevice))
	for _, g := range gpuGauges() {
		if n := len(samplesOf(t, scrape(t, h), g.name)); n != 4 {
			t.Errorf("no GPU held: %s has %d samples, want all 4", g.name, n)
		}
	}

	// Pod team-a/train holds GPUs 0 and 1, pod team-b/dra holds GPU 3: each loses its first, 0 and 3; GPU 1
	// stays with its holder and the free GPU 2 stays.
	kubelet.set(dpPod("team-a", "train", "worker", "nvidia.com/gpu", u[1], u[0]), draPod("team-b", "dra", cfg.DRADriverName, "node-a", DRADeviceName(3)))
	fams := scrape(t, h)
	for _, g := range gpuGauges() {
		ss := samplesOf(t, fams, g.name)
		for i := range 4 {
			n := len(ofGPU(ss, i))
			if (i == 0 || i == 3) && n != 0 {
				t.Errorf("%s still has %d samples of GPU %d, its holder's first", g.name, n, i)
			}
			if (i == 1 || i == 2) && n != 1 {
				t.Errorf("%s has %d samples of GPU %d, want 1: only each holder's first GPU goes missing", g.name, n, i)
			}
		}
		if slices.ContainsFunc(ss, func(s sample) bool { return s.labels[MetricLabelUUID] == u[0] }) {
			t.Errorf("%s still names GPU 0's UUID", g.name)
		}
	}
	if got := holdersOf(t, fams, 1); !slices.Equal(got, []string{"team-a/train/worker"}) {
		t.Errorf("the holder's other GPU must keep its holder, got %q", got)
	}

	p.SetFaultsFromAnnotation("")
	if got := holdersOf(t, scrape(t, h), 1); !slices.Equal(got, []string{"team-a/train/worker"}) {
		t.Errorf("fault off: GPU 1 attributed to %q, want it back with its holder", got)
	}
}

// metrics-wrong-pod names another pod than the holder for every held GPU (namespace and container stay),
// leaves unheld GPUs alone, and is undone at run time.
func TestMetricsWrongPodFault(t *testing.T) {
	cfg, socket := metricsConfig(t, 2, 2)
	p := mustNew(t, cfg)
	u := p.PhysicalUUIDs()
	servePodResources(t, socket).set(dpPod("team-a", "train", "worker", "nvidia.com/gpu", u[0]), draPod("team-b", "dra", cfg.DRADriverName, "node-a", DRADeviceName(2)))
	h := p.metricsHandler()

	p.SetFaultsFromAnnotation(string(FaultMetricsWrongPod))
	fams := scrape(t, h)
	for _, g := range gpuGauges() {
		ss := samplesOf(t, fams, g.name)
		if len(ss) != 4 {
			t.Errorf("%s has %d samples under wrong-pod, want all 4 GPUs", g.name, len(ss))
		}
		for i, pod := range map[int]string{0: "train", 2: "dra"} {
			for _, s := range ofGPU(ss, i) {
				got := s.labels[MetricLabelPod]
				if got == pod || got == "" {
					t.Errorf("%s of GPU %d names pod %q under wrong-pod, want another than the holder %s", g.name, i, got, pod)
				}
				if got != pod+MetricsWrongPodSuffix {
					t.Errorf("%s of GPU %d names pod %q, want %q", g.name, i, got, pod+MetricsWrongPodSuffix)
				}
			}
		}
		if s := ofGPU(ss, 0); len(s) == 1 && (s[0].labels[MetricLabelNamespace] != "team-a" || s[0].labels[MetricLabelContainer] != "worker") {
			t.Errorf("wrong-pod must change the pod name only: %v", s[0].labels)
		}
		for _, i := range []int{1, 3} {
			if s := ofGPU(ss, i); len(s) != 1 || holderOf(s[0]) != "" {
				t.Errorf("%s of unheld GPU %d: %v, want one sample without a holder", g.name, i, s)
			}
		}
	}

	p.SetFaultsFromAnnotation("")
	if got := holdersOf(t, scrape(t, h), 0); !slices.Equal(got, []string{"team-a/train/worker"}) {
		t.Errorf("fault off: GPU 0 attributed to %q, want its holder", got)
	}
}

// lockedBuffer collects log output written from the scrapes.
type lockedBuffer struct{ syncbuf.Buffer }

func (l *lockedBuffer) count(s string) int { return strings.Count(l.String(), s) }

// Without a kubelet to ask, scrapes still serve every GPU, without holders, and say so once, not at every
// scrape; once the kubelet answers, the holders are back and that is logged too.
func TestMetricsWithoutTheKubeletServeUnattributedSamples(t *testing.T) {
	cfg, socket := metricsConfig(t, 2, 0)
	var logs lockedBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))
	p := mustNew(t, cfg)
	h := p.metricsHandler()
	for range 3 {
		for _, s := range samplesOf(t, scrape(t, h), MetricFBFree) {
			if holderOf(s) != "" {
				t.Errorf("no kubelet, yet GPU %s is attributed to %s", s.labels[MetricLabelGPU], holderOf(s))
			}
		}
	}
	if n := logs.count("cannot ask the kubelet which pods hold the GPUs"); n != 1 {
		t.Errorf("the missing kubelet was logged %d times in 3 scrapes, want once", n)
	}

	servePodResources(t, socket).set(dpPod("team-a", "train", "worker", "nvidia.com/gpu", p.PhysicalUUIDs()[1]))
	if got := holdersOf(t, scrape(t, h), 1); !slices.Equal(got, []string{"team-a/train/worker"}) {
		t.Errorf("kubelet back: GPU 1 attributed to %q", got)
	}
	if logs.count("PodResources API answers again") != 1 {
		t.Errorf("the kubelet's return is not logged")
	}
}

// ServeMetrics answers on its listener until its context ends, then returns and stops listening.
func TestServeMetricsStopsWithItsContext(t *testing.T) {
	cfg, _ := metricsConfig(t, 1, 0)
	p := mustNew(t, cfg)
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.ServeMetrics(ctx, l) }()

	url := "http://" + l.Addr().String() + MetricsPath
	get := func() (string, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	body, err := get()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, MetricFBFree+"{") {
		t.Errorf("GET %s: no %s in\n%s", url, MetricFBFree, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeMetrics after its context ended: %v, want nil", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("ServeMetrics did not return after its context ended")
	}
	if _, err := get(); err == nil {
		t.Errorf("the endpoint still answers after ServeMetrics returned")
	}
}
