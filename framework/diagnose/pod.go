package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/internal/podcond"
)

// Container waiting reasons, as the kubelet writes them (pkg/kubelet/images,
// pkg/kubelet/container/sync_result.go in k8s v1.37, and the CRI's own pull errors in
// k8s.io/cri-api/pkg/errors).
func imagePullReason(r string) bool {
	return slices.Contains([]string{"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "RegistryUnavailable", "SignatureValidationFailed"}, r)
}

func createReason(r string) bool {
	return slices.Contains([]string{"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreStartHookError", "PostStartHookError"}, r)
}

// Kubelet event reasons (pkg/kubelet/events, pkg/kubelet/lifecycle).
const (
	eventFailedScheduling      = "FailedScheduling"
	eventFailedClaimCreation   = "FailedResourceClaimCreation" // resourceclaim controller
	eventFailedPrepareDRA      = "FailedPrepareDynamicResources"
	eventUnexpectedAdmission   = "UnexpectedAdmissionError"
	eventFailedMount           = "FailedMount"
	eventFailedAttach          = "FailedAttachVolume"
	eventFailedSandbox         = "FailedCreatePodSandBox"
	reasonUnexpectedAdmission  = "UnexpectedAdmissionError"
	admissionOutOfResourceHead = "OutOf" // kubelet lifecycle.InsufficientResourcePrefix
)

// podRank orders pods by how much they explain, from the status alone: a
// pod with a visible error first, then the least advanced. Collect then
// reads events and claims for that one pod only, so a 100-pod Job costs one
// events read.
func podRank(p *corev1.Pod) int {
	switch {
	case p.Status.Phase == corev1.PodFailed || containerError(p) != "":
		return 0
	case p.Spec.NodeName == "":
		return 1
	case p.Status.Phase == corev1.PodPending:
		return 2
	case p.Status.Phase == corev1.PodRunning && !allRunning(p):
		return 2
	case p.Status.Phase == corev1.PodRunning:
		return 3
	}
	return 4
}

// representativePod picks the pod whose state explains the workload best.
// Terminating pods are skipped while others exist: they belong to the past.
func representativePod(pods []corev1.Pod) *corev1.Pod {
	live := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			live = append(live, &pods[i])
		}
	}
	if len(live) == 0 {
		for i := range pods {
			live = append(live, &pods[i])
		}
	}
	slices.SortStableFunc(live, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(podRank(a), podRank(b)), a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	return live[0]
}

// containerError returns the first container (init first) waiting reason
// that is an error, or "".
func containerError(p *corev1.Pod) string {
	for _, cs := range allStatuses(p) {
		if w := cs.State.Waiting; w != nil && (imagePullReason(w.Reason) || createReason(w.Reason) || w.Reason == "CrashLoopBackOff") {
			return w.Reason
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return t.Reason
		}
	}
	return ""
}

// statusExplains reports a pod whose status alone gives the verdict, so
// Collect reads neither its events nor its claims: it succeeded; it failed
// (rejected by the kubelet, or on its node); it is held by a scheduling gate;
// a container reports an error; or all its containers run.
func statusExplains(p *corev1.Pod) bool {
	switch {
	case p.Status.Phase == corev1.PodSucceeded || kubeletRejected(p):
		return true
	case p.Spec.NodeName == "":
		c := podcond.Find(p, corev1.PodScheduled)
		return c != nil && c.Reason == corev1.PodReasonSchedulingGated
	}
	return p.Status.Phase == corev1.PodFailed || containerError(p) != "" || (p.Status.Phase == corev1.PodRunning && allRunning(p))
}

// kubeletRejected reports a pod the kubelet's admission rejected straight to
// Failed, with the device manager's error ("Allocate failed due to ...") or
// OutOf<resource>.
func kubeletRejected(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed &&
		(p.Status.Reason == reasonUnexpectedAdmission || strings.HasPrefix(p.Status.Reason, admissionOutOfResourceHead))
}

func allStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	out := append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...)
	return append(out, p.Status.ContainerStatuses...)
}

func allRunning(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// Commands a pod's verdict names as the next step.
func describePod(pod *corev1.Pod) string {
	return fmt.Sprintf("kubectl describe pod -n %s %s", pod.Namespace, pod.Name)
}

func podEventsCmd(pod *corev1.Pod) string {
	return fmt.Sprintf("kubectl get events -n %s --field-selector involvedObject.kind=Pod,involvedObject.name=%s", pod.Namespace, pod.Name)
}

func logsCmd(pod *corev1.Pod, container string) string {
	return fmt.Sprintf("kubectl logs -n %s %s -c %s --previous", pod.Namespace, pod.Name, container)
}

// admitted is the kubelet admission's pass: a bound pod the kubelet rejected straight to Failed (the device
// manager's allocation or OutOf<resource>).
func admitted(w view) (*Result, error) {
	pod := w.pod
	if !kubeletRejected(pod) {
		return nil, nil
	}
	return finalIfBare(pod, &Result{Stage: StageFailed, Layer: LayerKubelet, Reason: DevicePluginAllocateFailed,
		Messages: []string{pod.Status.Reason + ": " + pod.Status.Message}, Next: podEventsCmd(pod)}), nil
}

// containers is the containers' pass, from their states (current, where events may be stale) and the pod's
// phase: a finished pod, a container that cannot pull or be created, one that crashes or exited in error, a
// failed pod, or one whose containers all run. A pod whose containers are not created yet passes on. A
// pull or create that may still succeed is final once the kubelet has repeated the same failure long
// enough (repeats).
func containers(w view) (*Result, error) {
	pod := w.pod
	if pod.Status.Phase == corev1.PodSucceeded {
		return &Result{Stage: StageSucceeded, Layer: LayerNone, Reason: ReasonCompleted,
			Messages: []string{fmt.Sprintf("pod %s phase Succeeded", pod.Name)}, Next: describePod(pod)}, nil
	}
	for _, cs := range allStatuses(pod) {
		res := containerState(pod, cs)
		if res == nil {
			continue
		}
		if (res.Reason == ImagePullFailed || res.Reason == ContainerCreateFailed) && !res.Terminal {
			repeats(pod, w.events[eventsKey("Pod", pod.Name)], w.replaced, cs.Name, cs.State.Waiting, res)
		}
		return res, nil
	}
	if pod.Status.Phase == corev1.PodFailed {
		return finalIfBare(pod, &Result{Stage: StageFailed, Layer: LayerKubelet, Reason: ApplicationError,
			Messages: []string{fmt.Sprintf("pod %s phase Failed: %s: %s", pod.Name, pod.Status.Reason, pod.Status.Message)}, Next: describePod(pod)}), nil
	}
	if pod.Status.Phase == corev1.PodRunning && allRunning(pod) {
		return &Result{Stage: StageRunning, Layer: LayerNone, Reason: ReasonRunning,
			Messages: []string{fmt.Sprintf("pod %s phase Running on node %s", pod.Name, pod.Spec.NodeName)}, Next: describePod(pod)}, nil
	}
	return nil, nil
}

// containerState is the verdict on one container's state, or nil when it says nothing wrong: waiting on a
// pull or a create that failed, crashing, or terminated in error.
func containerState(pod *corev1.Pod, cs corev1.ContainerStatus) *Result {
	if w := cs.State.Waiting; w != nil {
		msg := fmt.Sprintf("container %s waiting: %s: %s", cs.Name, w.Reason, w.Message)
		switch {
		case imagePullReason(w.Reason):
			res := &Result{Stage: StageStarting, Layer: LayerRuntime, Reason: ImagePullFailed, Messages: []string{msg}, Next: describePod(pod)}
			if why := imageNeverPullable(w); why != "" {
				res.terminal(why)
			}
			return res
		case createReason(w.Reason):
			return &Result{Stage: StageStarting, Layer: LayerRuntime, Reason: ContainerCreateFailed, Messages: []string{msg}, Next: describePod(pod)}
		case w.Reason == "CrashLoopBackOff":
			// The application did start: the stage is Running, the pod's phase.
			res := &Result{Stage: StageRunning, Layer: LayerApplication, Reason: ApplicationError, Messages: []string{msg}, Next: logsCmd(pod, cs.Name)}
			if t := cs.LastTerminationState.Terminated; t != nil {
				res.Messages = append(res.Messages, terminatedText(cs.Name, t))
				if t.Reason == "OOMKilled" {
					res.Reason = OOMKilled
				}
			}
			return res
		}
	}
	t := cs.State.Terminated
	if t == nil || t.ExitCode == 0 {
		return nil
	}
	stage := StageRunning
	if pod.Status.Phase == corev1.PodFailed {
		stage = StageFailed
	}
	reason := ApplicationError
	if t.Reason == "OOMKilled" {
		reason = OOMKilled
	}
	res := &Result{Stage: stage, Layer: LayerApplication, Reason: reason, Messages: []string{terminatedText(cs.Name, t)}, Next: logsCmd(pod, cs.Name)}
	if stage == StageFailed {
		finalIfBare(pod, res)
	}
	return res
}

// starting is the last pass, of a bound pod whose containers are not created yet: the kubelet's events say
// why (the DRA driver's prepare, the device manager's admission, a volume, the sandbox), else it is
// starting.
func starting(w view) (*Result, error) {
	pod := w.pod
	podEvents := w.events[eventsKey("Pod", pod.Name)]
	if podEvents.failed() {
		return podEvents.verdict(nil)
	}
	evs := podEvents.val
	type rule struct {
		reasons []string
		layer   Layer
		reason  Reason
	}
	for _, r := range []rule{
		{[]string{eventFailedPrepareDRA}, LayerDRA, DRAPrepareFailed},
		{[]string{eventUnexpectedAdmission}, LayerKubelet, DevicePluginAllocateFailed},
		{[]string{eventFailedMount, eventFailedAttach}, LayerKubelet, VolumeMountFailed},
		{[]string{eventFailedSandbox}, LayerRuntime, ContainerCreateFailed},
	} {
		if e := latestEvent(evs, r.reasons...); e != nil {
			res := &Result{Stage: StageStarting, Layer: r.layer, Reason: r.reason, Messages: []string{e.Message}, Next: podEventsCmd(pod)}
			res.rests("Event", e.Namespace, e.Name)
			if r.reason == DRAPrepareFailed {
				if stop, err := addClaims(w.claims, res); stop != nil || err != nil {
					return stop, err
				}
				unregistered(pod, evs, w.replaced, w.readAt, res)
			}
			return res, nil
		}
	}
	res := &Result{Stage: StageStarting, Layer: LayerKubelet, Reason: ContainerStarting, Next: podEventsCmd(pod)}
	for _, cs := range allStatuses(pod) {
		if w := cs.State.Waiting; w != nil {
			res.Messages = append(res.Messages, fmt.Sprintf("container %s waiting: %s", cs.Name, w.Reason))
		}
	}
	if len(res.Messages) == 0 {
		res.Messages = []string{fmt.Sprintf("pod %s phase %s on node %s", pod.Name, pod.Status.Phase, pod.Spec.NodeName)}
	}
	return res, nil
}

func terminatedText(container string, t *corev1.ContainerStateTerminated) string {
	s := fmt.Sprintf("container %s terminated: exit code %d, reason %s", container, t.ExitCode, t.Reason)
	if t.Message != "" {
		s += ": " + t.Message
	}
	return s
}

// imageNeverPullable says why an image pull can never succeed, or "" when a retry might: the kubelet's
// ErrImageNeverPull (pull policy Never and the image is not on the node) and InvalidImageName are final;
// so is a registry that answered that the image or tag does not exist. A timeout or a rate limit is not.
func imageNeverPullable(w *corev1.ContainerStateWaiting) string {
	switch w.Reason {
	case "ErrImageNeverPull":
		return "the image is not on the node and its pull policy is Never"
	case "InvalidImageName":
		return "the image name is invalid"
	case "SignatureValidationFailed":
		return "the image's signature does not validate"
	}
	m := strings.ToLower(w.Message)
	for _, s := range []string{"not found", "manifest unknown", "name unknown", "repository does not exist", "pull access denied"} {
		if strings.Contains(m, s) {
			return "the registry says the image does not exist or may not be pulled (" + s + ")"
		}
	}
	return ""
}

// finalIfBare marks the result of a failed pod terminal when no controller will replace it (no owner)
// and it will not restart; a controller's pod is final only through its controller (a failed Job).
func finalIfBare(pod *corev1.Pod, res *Result) *Result {
	if metav1.GetControllerOf(pod) == nil && pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
		res.terminal(fmt.Sprintf("pod %s has failed, will not restart (restartPolicy Never) and no controller replaces it", pod.Name))
	}
	return res
}
