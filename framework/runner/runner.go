// Package runner runs the suite as a Job on the cluster (as hydrophone and sonobuoy run the Kubernetes
// conformance suite): `gpuconform run --in-cluster --image IMG`. It creates a ServiceAccount bound to the
// shipped role of the level, runs the runner image's `gpuconform run` in a Job, streams its log, copies
// the pod's artifacts back with an exec of the same binary (`gpuconform artifacts pack`), and deletes
// everything it created, checking through framework/audit that nothing with its label is left.
package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/runlease"
)

const (
	// Label marks every object the runner creates; its value is the runner's run ID. It is not the
	// suite's run label: the suite inside would count the runner's own objects as its leaks.
	Label = "gpuconform.io/runner"
	// Binary is where the runner image keeps the gpuconform binary.
	Binary = "/usr/local/bin/gpuconform"
	// ImageUser is the runner image's user: not root, as Pod Security "restricted" requires.
	ImageUser = "65532:65532"
	// ReadyMarker starts the line the pod prints when its artifacts are complete.
	ReadyMarker = "gpuconform-runner: artifacts ready"
	// container is the Job's one container.
	container = "runner"
	// podArtifacts is where the suite in the pod writes (an emptyDir).
	podArtifacts = "/artifacts"
	// fetchedFile tells the pod its artifacts were copied: it exits.
	fetchedFile = ".gpuconform-fetched"
	// uid is ImageUser's.
	uid = 65532
)

// StartError is a failure before the Job was created: nothing ran.
type StartError struct{ Err error }

// Error is the cause's message.
func (e *StartError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *StartError) Unwrap() error { return e.Err }

// Runner is one in-cluster run: what it was asked and what it created.
type Runner struct {
	opts  Options
	kube  kubernetes.Interface
	rest  *rest.Config
	audit audit.Auditor
	id    string
	out   io.Writer
	ns    string // the Job's namespace
	ownNS bool   // created by the runner
	// lease keeps the runner's objects live for other runs from before they exist until Cleanup: the
	// suite's own lease comes only once its pod runs.
	lease *runlease.Lease
}

// New prepares a run with ID id on the cluster c; progress and the pod's log go to out.
func New(c *cluster.Clients, opts Options, id string, out io.Writer) *Runner {
	return newRunner(c.Kube, c.REST, audit.For(c, false), opts, id, out)
}

func newRunner(kube kubernetes.Interface, cfg *rest.Config, a audit.Auditor, opts Options, id string, out io.Writer) *Runner {
	a.Owner = owner()
	return &Runner{opts: opts, kube: kube, rest: cfg, audit: a, id: id, out: out}
}

// ID is the run's ID: the value of Label on its objects, and the run ID of the artifacts it copies.
func (r *Runner) ID() string { return r.id }

// Run creates the runner's objects, follows the Job and copies the artifacts into Options.Artifacts; it
// returns the pod's exit code (the verdict's). An error before the Job exists is a *StartError. Call
// Cleanup afterwards, whatever Run returned.
func (r *Runner) Run(ctx context.Context) (int, error) {
	host, _ := os.Hostname()
	lease, err := runlease.Acquire(ctx, r.kube, runlease.Options{Namespace: r.opts.LeaseNamespace, RunID: r.id, Role: runlease.RoleRunner, Host: host})
	if err != nil {
		return 0, &StartError{fmt.Errorf("taking the runner's lease in namespace %s (it tells other runs this one is alive): %w", r.opts.LeaseNamespace, err)}
	}
	r.lease = lease
	if err := r.clearLeftovers(ctx); err != nil {
		return 0, &StartError{err}
	}
	if err := r.setup(ctx); err != nil {
		return 0, &StartError{err}
	}
	job, err := r.kube.BatchV1().Jobs(r.ns).Create(ctx, r.job(), metav1.CreateOptions{})
	if err != nil {
		return 0, &StartError{fmt.Errorf("creating the runner Job: %w", err)}
	}
	fmt.Fprintf(r.out, "gpuconform-runner: Job %s/%s (image %s, ServiceAccount %s bound to %s)\n", r.ns, job.Name, r.opts.Image, r.saName(), strings.Join(r.opts.Levels(), ", "))
	pod, err := r.waitPodStarted(ctx, job.Name)
	if err != nil {
		return 0, err
	}
	fetched, err := r.follow(ctx, pod)
	if err != nil {
		return 0, err
	}
	if !fetched {
		return 0, fmt.Errorf("pod %s/%s ended before its artifacts were ready: %s", r.ns, pod, r.podState(ctx, pod))
	}
	return r.waitExitCode(ctx, pod)
}

// labels are every runner object's.
func (r *Runner) labels() map[string]string {
	return map[string]string{Label: r.id, fixtures.ManagedByLabel: fixtures.ManagedByValue}
}

func (r *Runner) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: r.ns, Labels: r.labels()}
}

func (r *Runner) saName() string { return "gpuconform-runner-" + r.id }
