package pods

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"gpuconform.io/gpuconform/fixtures"
)

// logServer serves pod ns/p's log as the API server does, a chunk at a time: each write is flushed,
// and after the last one the stream stays open (the container holds) until release is closed.
func logServer(t *testing.T, chunks []string, release <-chan struct{}) (kubernetes.Interface, *string) {
	t.Helper()
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/ns/pods/p/log" {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no such pod","reason":"NotFound","code":404}`, http.StatusNotFound)
			return
		}
		query = r.URL.RawQuery
		for _, c := range chunks {
			fmt.Fprint(w, c)
			w.(http.Flusher).Flush()
		}
		if release != nil {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cs, &query
}

const report = `{"ok":true,"devices":["GPU-1"],"message":"1 device"}`

// The report's line comes in two pieces while the container holds its devices: the read returns with it,
// without waiting for the log to end (the server keeps the stream open until the read has returned).
func TestReportFromLogReturnsOnceTheReportIsWhole(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	cs, query := logServer(t, []string{"starting probe\n", report[:20], report[20:] + "\n"}, release)
	got, err := reportFromLog(t.Context(), cs, "ns", "p", "workload", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 1 || got.Devices[0] != "GPU-1" {
		t.Errorf("report %+v", got)
	}
	if !strings.Contains(*query, "follow=true") || !strings.Contains(*query, "container=workload") {
		t.Errorf("the log was read with %q, want a follow of container workload", *query)
	}
}

// A log that ends without a report (the container exited), or a container whose log cannot be read yet,
// is an error that says what came.
func TestReportFromLogWithoutAReport(t *testing.T) {
	cs, _ := logServer(t, []string{"starting probe\n", "nvidia-smi: not found\n"}, nil)
	_, err := reportFromLog(t.Context(), cs, "ns", "p", "workload", time.Hour)
	if err == nil || !strings.Contains(err.Error(), "no probe JSON line") || !strings.Contains(err.Error(), "nvidia-smi: not found") {
		t.Errorf("a log without a report: %v", err)
	}
	_, err = reportFromLog(t.Context(), cs, "ns", "other", "workload", time.Hour)
	if err == nil || !strings.Contains(err.Error(), "reading the log of container workload of pod ns/other") {
		t.Errorf("an unreadable log: %v", err)
	}
}

// A report that does not come within the bound ends the read with what came, and why the log stopped.
func TestReportFromLogBounded(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	cs, _ := logServer(t, []string{"starting probe\n"}, release)
	_, err := reportFromLog(t.Context(), cs, "ns", "p", "workload", 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no probe JSON line") || !strings.Contains(err.Error(), "the log stopped") {
		t.Errorf("a report that never comes: %v", err)
	}
}

// A Job's wait follows its current pod: a started one, else the newest live one; pods being deleted or
// failed and replaced are named with how they went; a failed pod with no successor is the answer.
func TestCurrentJobPod(t *testing.T) {
	at := func(minute int) metav1.Time { return metav1.NewTime(time.Date(2026, 1, 1, 12, minute, 0, 0, time.UTC)) }
	pod := func(name string, created int, set func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: fixtures.WorkloadContainer}}
		if set != nil {
			set(&p)
		}
		return p
	}
	pulling := func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}
	}
	deleting := func(p *corev1.Pod) { pulling(p); now := at(9); p.DeletionTimestamp = &now }
	running := func(p *corev1.Pod) { p.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{} }
	failed := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses[0].State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1}
	}

	gone := map[string]string{}
	p, replaced := CurrentJobPod([]corev1.Pod{pod("a", 1, deleting), pod("b", 2, nil)}, gone)
	if p.Name != "b" || replaced != "; replaced before it: a being deleted, ErrImageNeverPull: image not present" {
		t.Errorf("got %s, %q", p.Name, replaced)
	}
	// Once a went, it stays named even after it is no longer listed.
	if p, replaced = CurrentJobPod([]corev1.Pod{pod("b", 2, nil), pod("c", 3, running)}, gone); p.Name != "c" || !strings.Contains(replaced, "a being deleted") {
		t.Errorf("a started pod wins: got %s, %q", p.Name, replaced)
	}
	if p, _ = CurrentJobPod([]corev1.Pod{pod("x", 1, failed), pod("y", 2, nil)}, map[string]string{}); p.Name != "y" {
		t.Errorf("a failed pod with a successor is left for it: got %s", p.Name)
	}
	if p, replaced = CurrentJobPod([]corev1.Pod{pod("x", 1, failed), pod("z", 0, failed)}, map[string]string{}); p.Name != "x" || replaced != "" {
		t.Errorf("a failed pod without a successor is the answer: got %s, %q", p.Name, replaced)
	}
	if p, replaced = CurrentJobPod([]corev1.Pod{pod("a", 1, deleting)}, map[string]string{}); p != nil || !strings.Contains(replaced, "a being deleted") {
		t.Errorf("no current pod: %v, %q", p, replaced)
	}
}
