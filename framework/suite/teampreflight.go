package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/nspolicy"
	"gpuconform.io/gpuconform/framework/queues"
	"gpuconform.io/gpuconform/framework/run"
)

// teamPolicy is what a team namespace lets the suite use, as the team can read it.
type teamPolicy struct {
	Namespace   string
	Quotas      []corev1.ResourceQuota
	LimitRanges []corev1.LimitRange
	// Extended maps a DeviceClass to the extended resource its devices are also charged as.
	Extended map[string]string
	// Coverage is the LocalQueue's ClusterQueue's; nil when there is none to check or it was unreadable.
	Coverage *queues.Coverage
}

// teamDecision is what follows from a teamPolicy for the run's paths.
type teamDecision struct {
	// Keep are the paths a pod with one device fits; Blocked the others, with why.
	Keep    []gpu.Path
	Blocked []blocked
	// QueueGaps are the kept paths whose Kueue resource the ClusterQueue does not cover, with why.
	QueueGaps map[string]string
}

// blocked is a path one pod with one device does not fit, and the quota shortfalls and LimitRange
// violations in the way.
type blocked struct {
	Path     string
	Problems []string
}

// teamPreflight, in team-namespace mode, reads before the spec tree is built what the namespace and its
// LocalQueue let one workload of the suite use, so that a policy that would refuse it is reported once,
// with its figures, instead of as a failure of every spec: a path on which one pod with one device does
// not fit a ResourceQuota (hard − used < needed) or breaks a LimitRange is not exercised; when no path
// fits, the run refuses to start; a path whose Kueue resource the ClusterQueue does not cover has its
// queued specs not exercised. What the team may not read is noted, never a refusal: the API server still
// enforces it, and the specs then meet it with its diagnosis.
func (r *Run) teamPreflight(ctx context.Context) error {
	if r.Config.Namespace == "" || len(r.Paths) == 0 {
		return nil
	}
	policy, notes := r.readTeamPolicy(ctx)
	r.Notes = append(r.Notes, notes...)
	d := decideTeam(r.Env.Factory, r.Paths, policy)
	if len(d.Keep) == 0 {
		return refusal(policy.Namespace, d.Blocked)
	}
	r.Paths, r.queueGaps = d.Keep, d.QueueGaps
	for _, b := range d.Blocked {
		r.NotExercised(b.Path, fmt.Sprintf("namespace %s cannot hold one pod with one device on this path: %s", policy.Namespace, strings.Join(b.Problems, "; ")))
	}
	for _, p := range d.Keep {
		if gap := d.QueueGaps[p.Name()]; gap != "" {
			r.NotExercised(p.Name()+": specs submitted through Kueue", gap+"; the path's other specs run")
		}
	}
	return nil
}

// readTeamPolicy reads the namespace's ResourceQuotas and LimitRanges, the DRA path's DeviceClass and,
// when specs submit to the team's LocalQueue, its ClusterQueue's coverage. notes say what could not be
// read.
func (r *Run) readTeamPolicy(ctx context.Context) (teamPolicy, []string) {
	ns := r.Config.Namespace
	p := teamPolicy{Namespace: ns, Extended: map[string]string{}}
	var notes []string
	core := r.Clients.Kube.CoreV1()
	if list, err := core.ResourceQuotas(ns).List(ctx, metav1.ListOptions{}); err != nil {
		notes = append(notes, notChecked(fmt.Errorf("cannot list resourcequotas in %s: %w", ns, err)))
	} else {
		p.Quotas = list.Items
	}
	if list, err := core.LimitRanges(ns).List(ctx, metav1.ListOptions{}); err != nil {
		notes = append(notes, notChecked(fmt.Errorf("cannot list limitranges in %s: %w", ns, err)))
	} else {
		p.LimitRanges = list.Items
	}
	for _, path := range r.Paths {
		if dra, ok := path.(*gpu.DRA); ok {
			// Discovery read the classes already (the team's ClusterRole grants it); an unreadable one
			// charges no implicit extended resource, as a class without extendedResourceName.
			if dc, err := r.Clients.Kube.ResourceV1().DeviceClasses().Get(ctx, dra.DeviceClass, metav1.GetOptions{}); err == nil && dc.Spec.ExtendedResourceName != nil {
				p.Extended[dc.Name] = *dc.Spec.ExtendedResourceName
			}
		}
	}
	if lq := r.ExistingLocalQueue(); r.KueueUsable && lq != "" {
		if cov, err := queues.ReadCoverage(ctx, r.Clients.Kueue, ns, lq); err != nil {
			notes = append(notes, notChecked(err))
		} else {
			p.Coverage = &cov
		}
	}
	return p, notes
}

// notChecked is the note for a read that failed: "not checked: cannot list resourcequotas in NS:
// forbidden" for a missing permission (what was read, then the cause), else the whole error.
func notChecked(err error) string {
	if apierrors.IsForbidden(err) {
		what, _, _ := strings.Cut(err.Error(), ": ")
		return "not checked: " + what + ": forbidden"
	}
	return "not checked: " + err.Error()
}

// decideTeam judges each path by the pod the suite makes on it with one device (factory's CPU and memory,
// the path's device request, the claim from its template) against the policy. Of the ClusterQueue it
// requires only the path's Kueue resource: CPU and memory may be left out of Kueue's accounting by its
// configuration (resources.excludeResourcePrefixes), which a team cannot read.
func decideTeam(factory fixtures.Factory, paths []gpu.Path, p teamPolicy) teamDecision {
	d := teamDecision{QueueGaps: map[string]string{}}
	for _, path := range paths {
		w := factory.GPUPod("quota-check", p.Namespace).Path(path).Devices(1).Args(fixtures.ProbeArgs(1)...)
		pod := w.Obj()
		var templates []*resourcev1.ResourceClaimTemplate
		for _, o := range w.Prerequisites() {
			if t, ok := o.(*resourcev1.ResourceClaimTemplate); ok {
				templates = append(templates, t)
			}
		}
		var problems []string
		for _, s := range nspolicy.Shortfalls(p.Quotas, nspolicy.WorkloadCharges(pod, templates, p.Extended)...) {
			problems = append(problems, s.String())
		}
		for _, v := range nspolicy.Violations(p.LimitRanges, pod) {
			problems = append(problems, v.String())
		}
		if len(problems) > 0 {
			d.Blocked = append(d.Blocked, blocked{Path: path.Name(), Problems: problems})
			continue
		}
		d.Keep = append(d.Keep, path)
		if p.Coverage != nil {
			if gap := p.Coverage.Gap(path.QuotaResource()); gap != "" {
				d.QueueGaps[path.Name()] = gap
			}
		}
	}
	return d
}

// refusal is the error that stops a run no path of which fits: each problem once, with the paths it
// blocks, and what to change.
func refusal(ns string, blockedPaths []blocked) error {
	var problems []string
	paths := map[string][]string{}
	for _, b := range blockedPaths {
		for _, pr := range b.Problems {
			if !slices.Contains(problems, pr) {
				problems = append(problems, pr)
			}
			paths[pr] = append(paths[pr], b.Path)
		}
	}
	for i, pr := range problems {
		problems[i] = fmt.Sprintf("%s (%s)", pr, strings.Join(paths[pr], ", "))
	}
	return &run.Refusal{Why: fmt.Sprintf("refusing to start: namespace %s cannot hold one pod with one device on any allocation path: %s", ns, strings.Join(problems, "; ")),
		Fix: "free or raise the quota, relax the LimitRange, or size the suite's pods to it (--pod-cpu, --pod-memory)"}
}

// KueueFor reports whether specs on the path named path submit through Kueue: Kueue is usable and, in
// team-namespace mode, the LocalQueue's ClusterQueue covers the path's Kueue resource.
func (r *Run) KueueFor(path string) bool { return r.KueueUsable && r.queueGaps[path] == "" }

// QueueGaps are the paths whose Kueue resource the team's ClusterQueue does not cover, with why.
func (r *Run) QueueGaps() map[string]string { return r.queueGaps }

// TeamDecision is what the team preflight decided that shapes the spec tree (the paths kept, the queue
// gaps), for comparing parallel processes: each decides it before its spec tree is built.
func (r *Run) TeamDecision() string {
	names := make([]string, len(r.Paths))
	for i, p := range r.Paths {
		names[i] = p.Name()
	}
	b, _ := json.Marshal(struct {
		Paths     []string
		QueueGaps map[string]string
	}{names, r.queueGaps})
	return string(b)
}

// SameTeamDecision reports a team preflight decision of this process other than the first process's
// (first): the namespace's quota usage changed while the processes started.
func (r *Run) SameTeamDecision(process int, first string) error {
	if mine := r.TeamDecision(); mine != first {
		return fmt.Errorf("parallel process %d decided other allocation paths or queue gaps than process 1 from the team namespace's quota and queue (its usage changed while the processes started); rerun, or run without -p\nprocess 1: %s\nthis process: %s",
			process, first, mine)
	}
	return nil
}
