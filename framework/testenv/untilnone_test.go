package testenv

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func podsLW(kube *fake.Clientset, ns string) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kube.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kube.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}, kube)
}

// The cleanup's wait ends when the last pod is gone, from the watch; it lists once and watches once,
// however long the pods take; when it gives up it names what is left.
func TestUntilNoneEndsWhenTheLastObjectGoesAndNamesWhatIsLeft(t *testing.T) {
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	}
	kube := fake.NewClientset(pod("a"), pod("b"))
	done := make(chan error, 1)
	go func() {
		_, err := untilNone(t.Context(), podsLW(kube, "ns"), &corev1.Pod{})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	for _, name := range []string{"a", "b"} {
		select {
		case err := <-done:
			t.Fatalf("the wait ended (%v) while pod %s still existed", err, name)
		default:
		}
		if err := kube.CoreV1().Pods("ns").Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the wait failed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end when the last pod was deleted")
	}
	verbs := map[string]int{}
	for _, a := range kube.Actions() {
		verbs[a.GetVerb()]++
	}
	if verbs["list"] != 1 || verbs["watch"] != 1 {
		t.Errorf("requests by verb %v, want one list and one watch", verbs)
	}

	kube = fake.NewClientset(pod("stuck"))
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	left, err := untilNone(ctx, podsLW(kube, "ns"), &corev1.Pod{})
	if err == nil || !slices.Equal(left, []string{"stuck"}) {
		t.Errorf("gave up with %v, left %v; want an error naming the pod left", err, left)
	}
	if left, err := untilNone(t.Context(), podsLW(fake.NewClientset(), "ns"), &corev1.Pod{}); err != nil || left != nil {
		t.Errorf("nothing to wait for: %v %v", left, err)
	}
}
