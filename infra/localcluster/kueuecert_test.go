package localcluster

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func managerPod(name string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: KueueNamespace, Name: name, UID: types.UID(name),
		Labels: map[string]string{"control-plane": "controller-manager"}},
		Status: corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

// The kubelet is asked to sync a manager pod only once Kueue wrote its certificate, only for running pods
// that are not Ready, and again only after `again` while one stays not Ready.
func TestCertMountNudger(t *testing.T) {
	ctx := t.Context()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: KueueNamespace, Name: kueueCertSecret, ResourceVersion: "7"}}
	kube := fake.NewClientset(secret, managerPod("waiting", corev1.PodRunning, false), managerPod("ready", corev1.PodRunning, true),
		managerPod("pending", corev1.PodPending, false))
	n := &certMountNudger{kube: kube, again: 10 * time.Second, nudged: map[types.UID]nudge{}}
	at := time.Unix(1000, 0)
	annotation := func(name string) string {
		p, err := kube.CoreV1().Pods(KueueNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Annotations[certSyncAnnotation]
	}
	if got, err := n.once(ctx, at); err != nil || len(got) != 0 {
		t.Fatalf("an empty Secret: nudged %v (%v), want none: there is nothing to mount yet", got, err)
	}
	secret.Data = map[string][]byte{"tls.crt": []byte("cert")}
	if _, err := kube.CoreV1().Secrets(KueueNamespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := n.once(ctx, at)
	if err != nil || !slices.Equal(got, []string{"waiting"}) {
		t.Fatalf("with the certificate written: nudged %v (%v), want only the running pod that is not Ready", got, err)
	}
	first := annotation("waiting")
	if first == "" || annotation("ready") != "" || annotation("pending") != "" {
		t.Errorf("annotations: waiting %q, ready %q, pending %q", first, annotation("ready"), annotation("pending"))
	}
	if got, _ := n.once(ctx, at.Add(3*time.Second)); len(got) != 0 {
		t.Errorf("nudged %v again within 3s", got)
	}
	if got, _ := n.once(ctx, at.Add(11*time.Second)); !slices.Equal(got, []string{"waiting"}) || annotation("waiting") == first {
		t.Errorf("a pod still not Ready after 11s: nudged %v, annotation %q (was %q): the kubelet sees no change", got, annotation("waiting"), first)
	}
}
