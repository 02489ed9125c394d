package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/infra/localcluster"
)

// scaleStep is one measured step of the scale check.
type scaleStep struct {
	Name    string
	Took    time.Duration
	Alloc   uint64 // bytes allocated during the step
	HeapEnd uint64 // live heap after the step
	Note    string
}

// scaleCommand measures preflight, discovery and diagnose against a simulated large cluster: a
// throwaway API server (kube-apiserver and etcd built here, started through controller-runtime's
// envtest) holding N GPU nodes, each with a device-plugin resource and a DRA ResourceSlice. Only API
// objects matter to these steps, and no controller runs there to heartbeat nodes, so the nodes are
// created Ready and stay so. The figures are printed, never asserted (goal: each step ≤ 5 s).
func scaleCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cli.FlagSet("scale", stderr)
	nodes := fs.Int("nodes", 5000, "GPU nodes to simulate")
	workers := fs.Int("parallel", 32, "concurrent creates while populating the API server")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	root, err := localCheckout(nil, nil, nil, "scale")
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: %v\n", err)
		return 2
	}
	opts := localcluster.DefaultOptions(root)
	opts.Log = stderr
	lc, err := localcluster.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: %v\n", err)
		return 2
	}
	bin, err := lc.ControlPlaneBinaries(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: building kube-apiserver and etcd: %v\n", err)
		return 1
	}
	env := &envtest.Environment{BinaryAssetsDirectory: bin, ControlPlaneStartTimeout: 3 * time.Minute, ControlPlaneStopTimeout: time.Minute}
	if _, err := env.Start(); err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: starting the throwaway API server: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	user, err := env.AddUser(envtest.User{Name: "scale-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: %v\n", err)
		return 1
	}
	kc, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: %v\n", err)
		return 1
	}
	kcPath := filepath.Join(opts.OutputDir, "scale.kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: %v\n", err)
		return 1
	}
	adminCfg := user.Config()
	adminCfg.QPS, adminCfg.Burst = 2000, 4000 // populating is the set-up, not what is measured
	admin, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "scale: populating %d GPU nodes and their ResourceSlices\n", *nodes)
	start := time.Now()
	if err := populate(ctx, admin, *nodes, *workers); err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: populating: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "scale: populated in %s\n", time.Since(start).Round(time.Second))

	var steps []scaleStep
	measure := func(name string, f func() (string, error)) error {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		t := time.Now()
		note, err := f()
		took := time.Since(t)
		runtime.ReadMemStats(&after)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		steps = append(steps, scaleStep{Name: name, Took: took, Alloc: after.TotalAlloc - before.TotalAlloc, HeapEnd: after.HeapAlloc, Note: note})
		return nil
	}
	var clients *cluster.Clients
	var caps cluster.Capabilities
	cfg := config.Default()
	err = func() error {
		if err := measure("connect", func() (string, error) {
			var err error
			clients, err = cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: kcPath, Timeout: 30 * time.Second})
			return "", err
		}); err != nil {
			return err
		}
		if err := measure("preflight (RBAC)", func() (string, error) {
			perms := cluster.PreflightNeeds(cluster.Needs{OwnQueues: true, Kueue: true, DRA: true})
			return fmt.Sprintf("%d SelfSubjectAccessReviews", len(perms)), cluster.Preflight(ctx, clients.Kube, perms)
		}); err != nil {
			return err
		}
		if err := measure("discovery", func() (string, error) {
			snap, err := cluster.Collect(ctx, clients.Kube, cfg.Kueue.Namespace)
			if err != nil {
				return "", err
			}
			caps = cluster.Discover(snap, cfg)
			dp, dra := 0, 0
			if caps.DevicePlugin != nil {
				dp = len(caps.DevicePlugin.Allocatable)
			}
			if caps.DRA != nil {
				dra = len(caps.DRA.Devices)
			}
			return fmt.Sprintf("%d nodes read; device plugin on %d, DRA on %d; pool %d", len(snap.Nodes), dp, dra, len(caps.Pools.GPU.Nodes)), nil
		}); err != nil {
			return err
		}
		pod, err := pendingPod(ctx, admin, *nodes)
		if err != nil {
			return err
		}
		return measure("diagnose (pending GPU pod)", func() (string, error) {
			res, err := diagnose.Run(ctx, diagnose.Clients{Kube: clients.Kube}, diagnose.Target{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name})
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s/%s/%s", res.Stage, res.Layer, res.Reason), nil
		})
	}()
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform scale: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "STEP (%d GPU nodes)\tTIME (goal ≤ 5s)\tALLOCATED\tLIVE HEAP AFTER\tRESULT\n", *nodes)
	for _, s := range steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Took.Round(time.Millisecond), mib(s.Alloc), mib(s.HeapEnd), s.Note)
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "peak resident memory of this process: %s\n", peakRSS())
	return 0
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// peakRSS reads VmHWM from /proc/self/status (Linux).
func peakRSS() string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// scaleDriverNamespace holds the simulated DRA driver's kubelet plugin pods.
const scaleDriverNamespace = "gpu-operator"

// populate creates n Ready GPU nodes, as a GPU operator labels them, each with 8 nvidia.com/gpu
// allocatable, a ResourceSlice of 8 devices of driver gpu.nvidia.com and the driver's Ready kubelet plugin
// pod (discovery looks for it on the publishing nodes), plus the DeviceClass.
func populate(ctx context.Context, kube kubernetes.Interface, n, workers int) error {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleDriverNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: localcluster.DRADriverName},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", localcluster.DRADriverName)}}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	jobs := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				if err := createGPUNode(ctx, kube, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case err := <-errs:
			close(jobs)
			wg.Wait()
			return err
		case jobs <- i:
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func createGPUNode(ctx context.Context, kube kubernetes.Interface, i int) error {
	name := fmt.Sprintf("gpu-node-%05d", i)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, cluster.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", cluster.LabelGPUCount: "8",
		cluster.LabelDriverVersion: "550.54.15", "nvidia.com/gpu.present": "true",
	}}}
	created, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	eight := resource.MustParse("8")
	created.Status = corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96"), corev1.ResourceMemory: resource.MustParse("1Ti"), corev1.ResourcePods: resource.MustParse("110"), localcluster.GPUResource: eight},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("95"), corev1.ResourceMemory: resource.MustParse("1000Gi"), corev1.ResourcePods: resource.MustParse("110"), localcluster.GPUResource: eight},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}},
		NodeInfo:    corev1.NodeSystemInfo{OSImage: "Ubuntu 24.04", KernelVersion: "6.8.0", ContainerRuntimeVersion: "containerd://2.1.0", KubeletVersion: localcluster.KubernetesVersion},
	}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return err
	}
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: localcluster.DRADriverName, NodeName: ptr.To(name), Pool: resourcev1.ResourcePool{Name: name, ResourceSliceCount: 1},
	}}
	for d := range 8 {
		slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{Name: "gpu-" + strconv.Itoa(d), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid":          {StringValue: ptr.To(fmt.Sprintf("GPU-%08d-0000-0000-0000-%012d", i, d))},
			"productName":   {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			"driverVersion": {VersionValue: ptr.To("550.54.15")},
		}})
	}
	if _, err := kube.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return err
	}
	return createPluginPod(ctx, kube, name)
}

// createPluginPod creates the DRA driver's kubelet plugin pod on node, Running and Ready, with the host
// paths NVIDIA's DRA driver mounts.
func createPluginPod(ctx context.Context, kube kubernetes.Interface, node string) error {
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nvidia-dra-driver-kubelet-plugin-" + node, Namespace: scaleDriverNamespace}, Spec: corev1.PodSpec{
		NodeName:   node,
		Containers: []corev1.Container{{Name: "gpus", Image: "registry.example.com/k8s-dra-driver-gpu:v25.8.0"}},
		Volumes: []corev1.Volume{hostPath("plugins-registry", "/var/lib/kubelet/plugins_registry"),
			hostPath("plugins", "/var/lib/kubelet/plugins/"+localcluster.DRADriverName)},
	}}
	created, err := kube.CoreV1().Pods(scaleDriverNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status.Phase = corev1.PodRunning
	created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	_, err = kube.CoreV1().Pods(scaleDriverNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// pendingPod creates a pod that asks for more GPUs than any node has, with the scheduler's message and
// event as kube-scheduler writes them, so diagnose reads the nodes to explain it.
func pendingPod(ctx context.Context, kube kubernetes.Interface, n int) (*corev1.Pod, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: "ml"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "main", Image: "registry.example.com/train:v1",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{localcluster.GPUResource: resource.MustParse("16")}},
	}}}}
	created, err := kube.CoreV1().Pods("ml").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("0/%d nodes are available: %d Insufficient nvidia.com/gpu. preemption: 0/%d nodes are available: %d No preemption victims found for incoming pod.", n, n, n, n)
	created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: msg, LastTransitionTime: metav1.Now()}}
	if created, err = kube.CoreV1().Pods("ml").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	_, err = kube.CoreV1().Events("ml").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "train-0.scale", Namespace: "ml"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ml", Name: "train-0", UID: created.UID, APIVersion: "v1"},
		Reason:         "FailedScheduling", Type: corev1.EventTypeWarning, Message: msg,
		Source: corev1.EventSource{Component: "default-scheduler"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{})
	return created, err
}
