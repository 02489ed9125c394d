package conformance

import (
	"cmp"
	"strings"

	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/reports"
	"gpuconform.io/gpuconform/scenarios"
)

// policy completes the run's signoff policy from the configuration and what discovery found (prepared:
// discovery ran; facts: what the run offers), and returns the label filter the run uses: the user's,
// narrowed to the AI Conformance profile's specs when that profile is chosen.
func policy(signoff *reports.Signoff, cfg config.Config, r *suite.Run, prepared bool, facts suite.Facts, userFilter string) string {
	conf, version, _ := conformance.ParseProfile(cfg.Profile) // validated with the flags
	if prepared && !strings.HasPrefix(cfg.Profile, conformance.ProfileAIConformance+"-") {
		if v, ok := conformance.ForKubernetes(r.Caps.ServerVersion); ok {
			version = v // a profile without a version: the checklist of the cluster's own minor
		}
	}
	signoff.Profile = cmp.Or(cfg.Profile, conformance.ProfileSignoff)
	signoff.Conformance = reports.ConformanceClaims{Version: version, Claims: scenarios.Proofs(), Product: cfg.Product}
	if cfg.Signoff.PreUpgrade {
		signoff.PreUpgrade = scenarios.Upgrade.Label()
	}
	switch {
	case conf:
		// The profile runs only the specs that prove a requirement of its checklist, and requires each MUST
		// one a scenario claims: one it cannot show (no Kueue, no metrics exporter) leaves the run INCOMPLETE.
		signoff.ProfileFilter = scenarios.ProfileFilter(version)
		if len(signoff.Require) == 0 {
			signoff.Require = scenarios.ConformanceRequiredLabels(version)
		}
		return combineFilters(userFilter, signoff.ProfileFilter)
	case len(signoff.Require) == 0:
		signoff.Require = scenarios.RequiredLabels(facts)
	}
	return userFilter
}

// combineFilters narrows a user's label filter to the profile's: both must match.
func combineFilters(user, profile string) string {
	if user == "" {
		return profile
	}
	return "(" + user + ") && (" + profile + ")"
}
