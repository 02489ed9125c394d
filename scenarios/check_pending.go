package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/wait"
)

// expectation is the verdict a shortage spec requires.
type expectation struct {
	stage  diagnose.Stage
	layer  diagnose.Layer
	reason diagnose.Reason
	// messages must each appear in one of the verdict's messages: the component's own text first. An
	// entry "a || b" is satisfied by either text (the scheduler's words depend on which of its filters
	// rejected a node first, and so on the cluster's taints).
	messages []string
	// bound, when set, says what it means that the pod was bound after all (two devices that must never be
	// handed out together were): the wait then ends at once with that, instead of waiting out its budget for
	// a diagnosis that cannot come.
	bound func(ctx context.Context, pod *corev1.Pod) string
}

// pendingPodDiagnosed creates the pod (and its prerequisites), waits for the expected verdict, and
// checks the pod is still unbound: a diagnosis of a pod that then runs would be a false alarm.
func pendingPodDiagnosed(ctx context.Context, env *testenv.Env, w *fixtures.GPUPodWrapper, want expectation) {
	ginkgo.GinkgoHelper()
	pod := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, pod)
	target := wait.Target{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name}
	expectDiagnosis(ctx, env, target, want)
	got, err := env.Clients.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(got.Spec.NodeName).To(gomega.BeEmpty(), "pod %s was bound to %s although the diagnosis said %s", pod.Name, got.Spec.NodeName, want.reason)
	gomega.Expect(got.Status.Phase).To(gomega.Equal(corev1.PodPending))
}

// expectDiagnosis waits until framework/diagnose, run on the live object, returns the expected stage,
// layer and reason with every expected text in its evidence; the verdict's first moments (no scheduling
// attempt yet, Kueue not yet decided) legitimately say less. On failure the wait prints the last
// verdict; on success the verdict goes to the report, as evidence that the diagnosis names the layer.
func expectDiagnosis(ctx context.Context, env *testenv.Env, target wait.Target, want expectation) {
	ginkgo.GinkgoHelper()
	dc := diagnose.Clients{Kube: env.Clients.Kube}
	if env.KueuePresent {
		dc.Kueue = env.Clients.Kueue
	}
	var res *diagnose.Result
	budget := env.Timeouts.Admission + env.Timeouts.PodStart
	// A final verdict that is not the expected one (another reason, or evidence it lacks) will not
	// change: the wait ends on it instead of waiting out the budget. The verdict is the check's own.
	boundMeans := ""
	otherFinal := func(context.Context, wait.Target) (string, bool) {
		if boundMeans != "" {
			return boundMeans, true
		}
		if res == nil {
			return "", false
		}
		return res.String(), res.Terminal && !matches(res, want)
	}
	env.Wait.ForJudged(ctx, fmt.Sprintf("the diagnosis of %s to be %s/%s/%s", target, want.stage, want.layer, want.reason), target, budget, otherFinal, func(g gomega.Gomega) {
		if want.bound != nil && target.Kind == "Pod" {
			pod, err := env.Clients.Kube.CoreV1().Pods(target.Namespace).Get(ctx, target.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			if pod.Spec.NodeName != "" {
				boundMeans = fmt.Sprintf("pod %s was bound to %s: %s", pod.Name, pod.Spec.NodeName, want.bound(ctx, pod))
			}
			g.Expect(pod.Spec.NodeName).To(gomega.BeEmpty(), boundMeans)
		}
		var err error
		res, err = diagnose.Run(ctx, dc, diagnose.Target{Kind: target.Kind, Namespace: target.Namespace, Name: target.Name})
		g.Expect(err).NotTo(gomega.HaveOccurred(), "diagnose.Run")
		g.Expect(res.Reason).To(gomega.Equal(want.reason), "reason; verdict:\n%s", res)
		g.Expect(res.Stage).To(gomega.Equal(want.stage), "stage; verdict:\n%s", res)
		g.Expect(res.Layer).To(gomega.Equal(want.layer), "layer; verdict:\n%s", res)
		for _, m := range want.messages {
			g.Expect(hasEvidence(res, m)).To(gomega.BeTrue(), "evidence lacks %q; verdict:\n%s", m, res)
		}
	})
	ginkgo.GinkgoWriter.Printf("shortage diagnosis of %s:\n%s", target, res)
	ginkgo.AddReportEntry("diagnosis of "+target.String(), res.String())
}

// matches reports whether a verdict is the expected one, evidence included.
func matches(res *diagnose.Result, want expectation) bool {
	if res.Reason != want.reason || res.Stage != want.stage || res.Layer != want.layer {
		return false
	}
	for _, m := range want.messages {
		if !hasEvidence(res, m) {
			return false
		}
	}
	return true
}

// hasEvidence reports whether one of the verdict's messages contains the text, or one of the "||"
// alternatives.
func hasEvidence(res *diagnose.Result, want string) bool {
	for alt := range strings.SplitSeq(want, " || ") {
		if slices.ContainsFunc(res.Messages, func(have string) bool { return strings.Contains(have, alt) }) {
			return true
		}
	}
	return false
}
