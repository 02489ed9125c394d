package suite

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"gpuconform.io/gpuconform/framework/upgrade"
)

// Upgrade is what the run knows for an upgrade rehearsal: the provider (nil: Why), the target version and
// the node label that reports the driver version.
type Upgrade struct {
	Provider     upgrade.Provider
	Why          string
	To           string
	VersionLabel string
}

// UpgradeCommandLog is the file in the artifacts directory that holds every call of the upgrade script
// with its output.
const UpgradeCommandLog = "upgrade-command.log"

// planUpgrade decides the rehearsal's provider and target: the user's command, else the local cluster's
// provider where every canary node runs its fake agent; the target is --upgrade-to, else the version the
// local fake stack declares it can be upgraded to.
func (r *Run) planUpgrade(ctx context.Context) Upgrade {
	u := Upgrade{To: r.Config.Upgrade.To, VersionLabel: cmp.Or(r.Config.Upgrade.VersionLabel, upgrade.DriverVersionLabel)}
	local := &upgrade.Local{Kube: r.Clients.Kube, Namespace: upgrade.LocalNamespace}
	localServes := upgrade.LocalServes(r.canaryLabels())
	if u.To == "" && localServes {
		// The local fake stack declares its target, whichever provider applies it (the built-in one, or
		// the shipped script through the command provider).
		to, err := local.LocalTarget(ctx)
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("the local fake stack's upgrade target could not be read: %v", err))
		}
		u.To = to
	}
	switch {
	case r.Config.Upgrade.Command != "":
		// The pool's driver version before the upgrade is read for the script (GPUCONFORM_UPGRADE_FROM).
		c := r.upgradeCommand(r.Config.Upgrade.Command, UpgradeCommandLog)
		c.Kube, c.VersionLabel = r.Clients.Kube, u.VersionLabel
		u.Provider = c
	case localServes:
		u.Provider = local
	default:
		u.Why = "no upgrade provider for this cluster: give --upgrade-command SCRIPT (called as SCRIPT upgrade|rollback VERSION NODE...)"
	}
	return u
}

// DRAUpgradeCommandLog is the file in the artifacts directory that holds every call of the DRA upgrade
// script with its output.
const DRAUpgradeCommandLog = "dra-upgrade-command.log"

// planDRAUpgrade decides the DRA driver rehearsal's provider and target: the user's command, else the local
// cluster's provider where its canary agent runs in a DaemonSet of its own; the target is --dra-upgrade-to,
// else the version the local canary agent declares.
func (r *Run) planDRAUpgrade(ctx context.Context) Upgrade {
	u := Upgrade{To: r.Config.DRAUpgrade.To}
	local := &upgrade.LocalDRA{Kube: r.Clients.Kube, Namespace: upgrade.LocalNamespace}
	localServes := upgrade.LocalServes(r.canaryLabels()) && local.LocalDRAServes(ctx)
	if u.To == "" && localServes {
		to, err := local.LocalTarget(ctx)
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("the local canary agent's plugin upgrade target could not be read: %v", err))
		}
		u.To = to
	}
	switch {
	case r.Config.DRAUpgrade.Command != "":
		u.Provider = r.upgradeCommand(r.Config.DRAUpgrade.Command, DRAUpgradeCommandLog)
	case localServes:
		u.Provider = local
	default:
		u.Why = "no provider rolls this cluster's DRA kubelet plugin: give --dra-upgrade-command SCRIPT (called as SCRIPT upgrade|rollback VERSION NODE...)"
	}
	return u
}

// upgradeCommand is the command provider of script: it talks to the cluster the suite talks to (same
// kubeconfig and context), and its whole output lands next to the reports, in log.
func (r *Run) upgradeCommand(script, log string) *upgrade.Command {
	return &upgrade.Command{Path: script, RunID: r.RunID, Kubeconfig: r.Config.Kubeconfig, KubeContext: r.Config.Context,
		LogPath: filepath.Join(r.Config.ArtifactsDir, log)}
}

// canaryLabels are the labels of the canary pool's nodes.
func (r *Run) canaryLabels() []map[string]string {
	var out []map[string]string
	for _, n := range r.Nodes {
		if slices.Contains(r.Caps.Pools.Canary.Nodes, n.Name) {
			out = append(out, n.Labels)
		}
	}
	return out
}
