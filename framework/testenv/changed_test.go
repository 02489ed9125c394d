package testenv

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"gpuconform.io/gpuconform/framework/timeline"
)

// A spec with several namespaces (the upgrade rehearsal) wakes its waits on a change in any of them, not
// only in the newest; and the channel that watches several recorders is closed when one of them stops, so
// its goroutine never outlives the spec.
func TestChangedFollowsEveryNamespaceOfTheSpec(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset()
	first := timeline.Start(ctx, kube, nil, "first", "")
	newest := timeline.Start(ctx, kube, nil, "newest", "")
	e := &Env{recorder: newest, recorders: []*timeline.Recorder{first, newest}}

	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	ch := e.Changed()
	if _, err := kube.BatchV1().Jobs("first").Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "first"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Fatal("a Job created in the spec's first namespace did not wake Changed")
	}

	ch = e.Changed()
	first.Stop(ctx, "spec")
	if !closed(ch) {
		t.Fatal("the channel watching both recorders stayed open after one stopped")
	}
	newest.Stop(ctx, "spec")
	if (&Env{}).Changed() != nil {
		t.Error("between specs Changed must be nil")
	}
}

// The upgrade rehearsal checks each path from a goroutine of its own: Changed, Note and Timeline are
// called while another goroutine's namespace adds its recorder (go test -race reports any unguarded
// access).
func TestRecordersAreSafeAcrossGoroutines(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset()
	e := &Env{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20 {
			r := timeline.Start(ctx, kube, nil, "ns", "")
			e.mu.Lock()
			e.recorder, e.recorders = r, append(e.recorders, r)
			e.mu.Unlock()
			e.Note("train", timeline.Fault, "Device/gpu-0", "")
			if i%2 == 0 {
				r.Stop(ctx, "spec")
			}
		}
	}()
	for range 200 {
		_ = e.Changed()
		e.Note("train", timeline.Fault, "Device/gpu-1", "")
	}
	<-done
	if e.current() == nil || len(e.recorders) != 20 {
		t.Errorf("recorders: current %v, %d of 20", e.current(), len(e.recorders))
	}
}
