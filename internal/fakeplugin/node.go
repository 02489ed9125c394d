package fakeplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// Node label keys the plugin owns. They mirror GPU Feature Discovery so that scenarios and the
// compatibility record read the same labels on the fake cluster as on a real NVIDIA node.
const (
	LabelProduct         = "nvidia.com/gpu.product"
	LabelCount           = "nvidia.com/gpu.count"
	LabelMemory          = "nvidia.com/gpu.memory"
	LabelFamily          = "nvidia.com/gpu.family"
	LabelSharingStrategy = "nvidia.com/gpu.sharing-strategy"
	LabelReplicas        = "nvidia.com/gpu.replicas"
	LabelDriverFull      = "nvidia.com/cuda.driver-version.full"
	LabelDriverMajor     = "nvidia.com/cuda.driver-version.major"
	LabelDriverMinor     = "nvidia.com/cuda.driver-version.minor"
	LabelDriverRevision  = "nvidia.com/cuda.driver-version.revision"
	LabelRuntimeFull     = "nvidia.com/cuda.runtime-version.full"
	LabelRuntimeMajor    = "nvidia.com/cuda.runtime-version.major"
	LabelRuntimeMinor    = "nvidia.com/cuda.runtime-version.minor"
	// LabelPluginVersion lets the upgrade rehearsal see which plugin revision serves the node.
	LabelPluginVersion = "gpuconform.io/fake-device-plugin-version"

	// GFD's MIG labels. Under the single strategy the nvidia.com/gpu.* labels describe the MIG devices
	// (product, count, memory, slices); under the mixed strategy nvidia.com/gpu.count counts the whole
	// GPUs and each profile P gets nvidia.com/mig-<P>.* labels (MIGProfileLabel).
	LabelMIGStrategy     = "nvidia.com/mig.strategy"
	LabelMIGCapable      = "nvidia.com/mig.capable"
	LabelSlicesGI        = "nvidia.com/gpu.slices.gi"
	LabelSlicesCI        = "nvidia.com/gpu.slices.ci"
	LabelMultiprocessors = "nvidia.com/gpu.multiprocessors"
)

// Suffixes of the per-profile labels of the mixed MIG strategy (MIGProfileLabel).
const (
	MIGLabelCount           = "count"
	MIGLabelMemory          = "memory"
	MIGLabelProduct         = "product"
	MIGLabelSlicesGI        = "slices.gi"
	MIGLabelSlicesCI        = "slices.ci"
	MIGLabelMultiprocessors = "multiprocessors"
)

var migLabelSuffixes = []string{MIGLabelCount, MIGLabelMemory, MIGLabelProduct, MIGLabelSlicesGI, MIGLabelSlicesCI, MIGLabelMultiprocessors}

// MIGProfileLabel is GFD's label of profile under the mixed strategy: "nvidia.com/mig-3g.40gb.count".
func MIGProfileLabel(profile, suffix string) string {
	return fakegpu.MIGResource(profile) + "." + suffix
}

// OwnedLabelKeys lists every node label the plugin manages. A key whose value the current config does
// not define (a driver version without a revision, the MIG labels of another sharing mode) is deleted,
// so labels left by an older revision of the plugin or an earlier mode never linger.
func OwnedLabelKeys() []string {
	keys := []string{
		LabelProduct, LabelCount, LabelMemory, LabelFamily, LabelSharingStrategy, LabelReplicas,
		LabelDriverFull, LabelDriverMajor, LabelDriverMinor, LabelDriverRevision,
		LabelRuntimeFull, LabelRuntimeMajor, LabelRuntimeMinor, LabelPluginVersion,
		LabelMIGStrategy, LabelMIGCapable, LabelSlicesGI, LabelSlicesCI, LabelMultiprocessors,
	}
	for _, prof := range fakegpu.H100Profiles {
		for _, suffix := range migLabelSuffixes {
			keys = append(keys, MIGProfileLabel(prof.Name, suffix))
		}
	}
	return keys
}

// NodeLabels returns the labels the plugin publishes for this config; owned keys that are absent from
// the map are to be removed from the node.
func (c Config) NodeLabels() map[string]string {
	l := map[string]string{
		LabelProduct:         c.Product,
		LabelCount:           strconv.Itoa(c.Devices),
		LabelMemory:          strconv.Itoa(c.MemoryMiB),
		LabelFamily:          c.Family,
		LabelSharingStrategy: c.SharingStrategy(),
		LabelReplicas:        strconv.Itoa(c.Replicas),
		LabelPluginVersion:   c.PluginVersion,
	}
	c.addSharingLabels(l)
	addVersion(l, c.DriverVersion, LabelDriverFull, LabelDriverMajor, LabelDriverMinor, LabelDriverRevision)
	addVersion(l, c.CUDAVersion, LabelRuntimeFull, LabelRuntimeMajor, LabelRuntimeMinor)
	for k, v := range l {
		if v = LabelValue(v); v == "" {
			delete(l, k)
		} else {
			l[k] = v
		}
	}
	return l
}

// addSharingLabels sets what GFD labels differently per sharing mode. Time-slicing and MPS rename the
// product "<product>-SHARED" unless the plugin renames the resource (GFD's resourceLabeler appends it only
// to a shared resource that keeps its name). mig-single
// describes the MIG devices on the nvidia.com/gpu.* labels; mig-mixed counts the whole GPUs there and
// labels each profile on nvidia.com/mig-<P>.*.
func (c Config) addSharingLabels(l map[string]string) {
	switch c.Mode() {
	case fakegpu.SharingTimeSlicing, fakegpu.SharingMPS:
		if !c.RenameShared {
			l[LabelProduct] = c.Product + "-SHARED"
		}
	case fakegpu.SharingMIGSingle:
		prof, _ := fakegpu.ProfileByName(fakegpu.SingleLayout[0].Profile)
		l[LabelMIGStrategy], l[LabelMIGCapable] = "single", "true"
		l[LabelProduct] = fakegpu.MIGProduct(c.Product, prof.Name)
		l[LabelCount] = strconv.Itoa(c.Devices * len(fakegpu.SingleLayout))
		l[LabelMemory] = strconv.Itoa(prof.MemoryMiB)
		l[LabelSlicesGI], l[LabelSlicesCI] = strconv.Itoa(prof.Slices), strconv.Itoa(prof.Slices)
		l[LabelMultiprocessors] = strconv.Itoa(prof.Multiprocessors)
	case fakegpu.SharingMIGMixed:
		l[LabelMIGStrategy], l[LabelMIGCapable] = "mixed", "true"
		whole, perProfile := 0, map[string]int{}
		for i := range c.Devices {
			layout := fakegpu.LayoutFor(fakegpu.SharingMIGMixed, i)
			if layout == nil {
				whole++
			}
			for _, pl := range layout {
				perProfile[pl.Profile]++
			}
		}
		l[LabelCount] = strconv.Itoa(whole)
		for name, n := range perProfile {
			prof, _ := fakegpu.ProfileByName(name)
			l[MIGProfileLabel(name, MIGLabelCount)] = strconv.Itoa(n)
			l[MIGProfileLabel(name, MIGLabelMemory)] = strconv.Itoa(prof.MemoryMiB)
			l[MIGProfileLabel(name, MIGLabelProduct)] = fakegpu.MIGProduct(c.Product, name)
			l[MIGProfileLabel(name, MIGLabelSlicesGI)] = strconv.Itoa(prof.Slices)
			l[MIGProfileLabel(name, MIGLabelSlicesCI)] = strconv.Itoa(prof.Slices)
			l[MIGProfileLabel(name, MIGLabelMultiprocessors)] = strconv.Itoa(prof.Multiprocessors)
		}
	}
}

// addVersion splits "550.54.15" into the full/major/minor/revision labels named by keys (full first).
func addVersion(l map[string]string, version string, keys ...string) {
	if version == "" {
		return
	}
	l[keys[0]] = version
	for i, part := range strings.SplitN(version, ".", len(keys)-1) {
		l[keys[i+1]] = part
	}
}

// LabelValue makes s a valid label value the way GFD does: every character a label value cannot hold
// (spaces included) becomes '-', the value is cut to 63 characters, and it must start and end with an
// alphanumeric.
func LabelValue(s string) string {
	isAlnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	b := []byte(s)
	for i, c := range b {
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	for len(b) > 0 && !isAlnum(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && !isAlnum(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return string(b)
}

// labelPatch is a JSON merge patch that sets our labels and deletes our undefined keys (null), leaving
// every other label on the node untouched.
func (c Config) labelPatch() ([]byte, error) {
	want := c.NodeLabels()
	labels := map[string]any{}
	for _, k := range OwnedLabelKeys() {
		if v, ok := want[k]; ok {
			labels[k] = v
		} else {
			labels[k] = nil
		}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
}

// labelsCurrent reports whether the node already carries exactly our labels.
func (c Config) labelsCurrent(have map[string]string) bool {
	want := c.NodeLabels()
	for _, k := range OwnedLabelKeys() {
		w, wok := want[k]
		h, hok := have[k]
		if wok != hok || w != h {
			return false
		}
	}
	return true
}

// PublishLabels patches the plugin's labels onto its Node once.
func (p *Plugin) PublishLabels(ctx context.Context, client kubernetes.Interface) error {
	patch, err := p.cfg.labelPatch()
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, p.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch labels of node %s: %w", p.cfg.NodeName, err)
	}
	p.log.Info("published node labels", "labels", p.cfg.NodeLabels())
	return nil
}

// SyncLabels publishes the labels at start (retrying with backoff while the API server is unreachable)
// and again whenever WatchNode sees them drift, e.g. after the Node object was recreated. It returns when
// ctx ends.
func (p *Plugin) SyncLabels(ctx context.Context, client kubernetes.Interface) {
	backoff := p.cfg.RegisterInitialBackoff
	for {
		if err := p.PublishLabels(ctx, client); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Error("cannot publish node labels; retrying", "err", err, "retry_in", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, p.cfg.RegisterMaxBackoff)
			continue
		}
		backoff = p.cfg.RegisterInitialBackoff
		select {
		case <-ctx.Done():
			return
		case <-p.labelsDrifted:
		}
	}
}

// WatchNode follows the plugin's own Node object until ctx ends: its UnhealthyDevicesAnnotation drives
// device health, and a change to our labels wakes SyncLabels. An informer (rather than a bare watch)
// takes care of relisting after watch expiry and API server restarts. nodeSynced is closed once the
// first state of the node is known.
func (p *Plugin) WatchNode(ctx context.Context, client kubernetes.Interface) {
	selector := fields.OneTermEqualSelector("metadata.name", p.cfg.NodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return client.CoreV1().Nodes().List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return client.CoreV1().Nodes().Watch(ctx, opts)
		},
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		// The wrapper passes on whether the client supports streaming lists (fake clientsets do not).
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, client),
		ObjectType:    &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    p.onNode,
			UpdateFunc: func(_, obj any) { p.onNode(obj) },
		},
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			p.log.Info("watching own node", "annotation", UnhealthyDevicesAnnotation)
			p.nodeSyncOnce.Do(func() { close(p.nodeSynced) })
		}
	})
	informer.RunWithContext(ctx)
}

func (p *Plugin) onNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Name != p.cfg.NodeName {
		return // the field selector should make this impossible; be safe against clients that ignore it
	}
	p.SetUnhealthyFromAnnotation(node.Annotations[UnhealthyDevicesAnnotation])
	p.SetFaultsFromAnnotation(node.Annotations[FaultsAnnotation])
	p.mu.Lock()
	p.versionOverride = node.Annotations[DriverVersionAnnotation]
	p.noPluginSeen = node.Labels[DevicePluginDeployLabel] == "false"
	p.mu.Unlock()
	if !p.cfg.labelsCurrent(node.Labels) {
		select {
		case p.labelsDrifted <- struct{}{}:
		default: // a resync is already pending
		}
	}
}

// DevicePluginDeployLabel is the NVIDIA GPU Operator's label read at start (fakegpu.DevicePluginDeployLabel).
const DevicePluginDeployLabel = fakegpu.DevicePluginDeployLabel

// DriverVersionAnnotation on a node sets the fake driver version the agent reports there, read when the
// agent starts: a pool-scoped driver upgrade (framework/upgrade's local provider) sets it on the pool's
// nodes and restarts their agents, as a GPU operator rolls a new driver onto a node pool.
const DriverVersionAnnotation = "gpuconform.io/fake-driver-version"

// BrokenVersionSuffix marks a fake driver version whose plugin never comes up (it neither registers nor
// publishes a slice): the broken upgrade of the rehearsal's selfcheck.
const BrokenVersionSuffix = "-broken"

func (p *Plugin) driverVersionOverride() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.versionOverride
}
