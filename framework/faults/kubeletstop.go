package faults

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/fixtures"
)

// KubeletStop is the node provider for clusters where the suite may run a privileged pod on GPU nodes
// (opt-in, --fault-provider=kubelet-stop): a helper pod in the helper namespace, sharing the host's PID
// namespace, freezes the node's kubelet for StopFor. The node stops heartbeating, goes NotReady and its
// pods are evicted exactly as when its machine is gone, while the machine, the runtime and the helper keep
// running; the helper thaws the kubelet when the time is up, also when it is deleted or the suite is
// gone, so the node always comes back. StartNode cannot end the outage early (the frozen kubelet cannot
// act on anything): the node returns when StopFor has passed.
type KubeletStop struct {
	Kube      kubernetes.Interface
	RunID     string
	Namespace string
	// Image is the workload image (it carries `gpu-workload host-signal`).
	Image      string
	PullPolicy corev1.PullPolicy
	// Resources are the helper container's CPU and memory, requests equal to limits, so a quota or
	// LimitRange on the helper namespace admits it; empty: the fixtures' defaults.
	Resources corev1.ResourceRequirements
	// StopFor bounds every outage.
	StopFor time.Duration
}

// Name implements NodeProvider.
func (k *KubeletStop) Name() string {
	return fmt.Sprintf("kubelet-stop (privileged helper in %s freezes the kubelet for %s)", k.Namespace, k.StopFor)
}

func (k *KubeletStop) helper(node, purpose string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("gpuconform-%s-%s", purpose, node),
			Namespace: k.Namespace,
			Labels:    map[string]string{fixtures.RunLabel: k.RunID, fixtures.ManagedByLabel: fixtures.ManagedByValue},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node, // exactly there, without the scheduler
			HostPID:                       true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			// The node's own NotReady/unreachable taints must not evict the helper that thaws it.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            purpose,
				Image:           k.Image,
				ImagePullPolicy: k.PullPolicy,
				Command:         append([]string{fixtures.WorkloadBinary, "host-signal", "--process", "kubelet"}, args...),
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](0)},
				Resources:       k.resources(),
			}},
		},
	}
}

// resources are Resources, or the fixtures' defaults when none are set.
func (k *KubeletStop) resources() corev1.ResourceRequirements {
	if len(k.Resources.Requests) == 0 && len(k.Resources.Limits) == 0 {
		return fixtures.NewFactory(k.RunID).Resources()
	}
	return *k.Resources.DeepCopy()
}

func (k *KubeletStop) start(ctx context.Context, pod *corev1.Pod) error {
	// A helper of an earlier stop on this node has finished; replace it.
	_ = k.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	// The deleted helper may take a while to go; until then the create answers AlreadyExists.
	var createErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
		_, createErr = k.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(createErr) {
			return false, nil
		}
		return createErr == nil, createErr
	})
	if err != nil {
		if wait.Interrupted(err) && ctx.Err() == nil && createErr != nil {
			err = createErr // still there after 30s: say so rather than "context deadline exceeded"
		}
		return fmt.Errorf("creating the privileged helper pod %s/%s (it needs a namespace that admits privileged pods: --helper-namespace): %w", pod.Namespace, pod.Name, err)
	}
	// The helper acts as soon as its container runs; wait for that, so a helper that cannot start (image,
	// a webhook) is reported here and not as a node that never went NotReady. A kubelet frozen before it
	// reported the container running is why this gives up quietly after a minute.
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		p, err := k.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			return false, nil //nolint:nilerr // a failed read is retried until the minute is up
		case p.Status.Phase == corev1.PodFailed:
			return false, fmt.Errorf("helper pod %s/%s failed: %s %s", pod.Namespace, pod.Name, p.Status.Reason, p.Status.Message)
		case p.Status.Phase != corev1.PodPending:
			return true, nil
		case len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating":
			w := p.Status.ContainerStatuses[0].State.Waiting
			return false, fmt.Errorf("helper pod %s/%s cannot start: %s %s", pod.Namespace, pod.Name, w.Reason, w.Message)
		}
		return false, nil
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return nil // the minute passed quietly
	}
	return err
}

// ShutsDown implements NodeProvider: only the kubelet stops; the pods' containers keep running.
func (k *KubeletStop) ShutsDown() bool { return false }

// StopNode implements NodeProvider.
func (k *KubeletStop) StopNode(ctx context.Context, node string) error {
	return k.start(ctx, k.helper(node, "kubelet-stop", "--stop-for", k.StopFor.String()))
}

// StartNode implements NodeProvider: the helper thaws the kubelet when StopFor has passed; its pod is
// deleted once the kubelet can act on that again.
func (k *KubeletStop) StartNode(ctx context.Context, node string) error {
	_ = k.Kube.CoreV1().Pods(k.Namespace).Delete(ctx, k.helper(node, "kubelet-stop").Name, metav1.DeleteOptions{})
	return nil
}

// RestartKubelet implements NodeProvider: SIGTERM to the kubelet; its service manager starts it again
// (kubeadm's and kind's units say Restart=always).
func (k *KubeletStop) RestartKubelet(ctx context.Context, node string) error {
	return k.start(ctx, k.helper(node, "kubelet-restart", "--signal", "TERM"))
}
