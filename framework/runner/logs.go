package runner

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// follow streams the pod's log to the runner's output until the pod says its artifacts are ready, then
// copies them; the stream is reopened if the connection drops. It reports false when the pod ended
// without saying so.
func (r *Runner) follow(ctx context.Context, pod string) (bool, error) {
	var since *metav1.Time
	for {
		ready, err := r.streamUntilReady(ctx, pod, since)
		if err != nil {
			return false, err
		}
		if ready {
			return true, r.fetch(ctx, pod)
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		p, err := r.kube.CoreV1().Pods(r.ns).Get(ctx, pod, metav1.GetOptions{})
		if err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			return false, nil
		}
		since = &metav1.Time{Time: time.Now()}
	}
}

// streamUntilReady copies the pod's log from since until the ready marker or the stream's end.
func (r *Runner) streamUntilReady(ctx context.Context, pod string, since *metav1.Time) (bool, error) {
	opts := &corev1.PodLogOptions{Container: container, Follow: true, SinceTime: since}
	stream, err := r.kube.CoreV1().Pods(r.ns).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return false, fmt.Errorf("following the runner's log: %w", err)
	}
	defer stream.Close()
	sc := bufio.NewScanner(stream)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fmt.Fprintln(r.out, sc.Text())
		if strings.HasPrefix(sc.Text(), ReadyMarker) {
			return true, nil
		}
	}
	return false, nil
}
