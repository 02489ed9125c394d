package localcluster

import (
	"errors"
	"io"
	"testing"
)

func TestUnchangedMatchesOnlyTheFingerprintKeptAfterSuccess(t *testing.T) {
	c := &Cluster{opts: Options{Name: "t", CacheDir: t.TempDir()}}
	fp := fingerprint("manifest", "Deployment/kueue-system/m=uid1@10\nConfigMap/kueue-system/c=uid2@11")
	if c.unchanged("kueue", fp) {
		t.Fatal("a part never brought up counted as unchanged")
	}
	c.remember("kueue", fp)
	if !c.unchanged("kueue", fp) {
		t.Fatal("the kept fingerprint did not match itself")
	}
	// The same objects listed in another order are the same state.
	if !c.unchanged("kueue", fingerprint("manifest", "ConfigMap/kueue-system/c=uid2@11\nDeployment/kueue-system/m=uid1@10")) {
		t.Error("order of the listing changed the fingerprint")
	}
	for name, other := range map[string]string{
		"an edit (resourceVersion)":  fingerprint("manifest", "Deployment/kueue-system/m=uid1@12\nConfigMap/kueue-system/c=uid2@11"),
		"a recreation (uid)":         fingerprint("manifest", "Deployment/kueue-system/m=uid9@10\nConfigMap/kueue-system/c=uid2@11"),
		"another manifest":           fingerprint("manifest v2", "Deployment/kueue-system/m=uid1@10\nConfigMap/kueue-system/c=uid2@11"),
		"no fingerprint (no answer)": "",
	} {
		if c.unchanged("kueue", other) {
			t.Errorf("%s counted as unchanged", name)
		}
	}
	if c.unchanged("network", fp) {
		t.Error("one part's fingerprint matched another part")
	}
	c.forget("kueue")
	if c.unchanged("kueue", fp) {
		t.Error("a forgotten part still counted as unchanged")
	}
	c.remember("kueue", "")
	if c.unchanged("kueue", "") {
		t.Error("an empty fingerprint was kept")
	}
}

func TestUnlessUnchangedAppliesOnceProvesEveryTime(t *testing.T) {
	c := &Cluster{opts: Options{Name: "t", CacheDir: t.TempDir(), Log: io.Discard}}
	fp := "state-1"
	var applied, proved int
	var proveErr error
	var lastFresh bool
	up := func() error {
		return c.unlessUnchanged("part", "the part", func() string { return fp },
			func() error { applied++; return nil },
			func(fresh bool) error { proved++; lastFresh = fresh; return proveErr })
	}
	// A failed proof keeps no fingerprint: the next bring-up applies again.
	proveErr = errors.New("devices not advertised")
	if err := up(); err == nil || applied != 1 || proved != 1 || lastFresh {
		t.Fatalf("first: err %v, applied %d, proved %d, fresh %v", err, applied, proved, lastFresh)
	}
	proveErr = nil
	if err := up(); err != nil || applied != 2 || proved != 2 || lastFresh {
		t.Fatalf("after a failed proof: err %v, applied %d, proved %d, fresh %v", err, applied, proved, lastFresh)
	}
	if err := up(); err != nil || applied != 2 || proved != 3 || !lastFresh {
		t.Fatalf("unchanged: err %v, applied %d, proved %d, fresh %v", err, applied, proved, lastFresh)
	}
	fp = "state-2"
	if err := up(); err != nil || applied != 3 || proved != 4 || lastFresh {
		t.Fatalf("changed: err %v, applied %d, proved %d, fresh %v", err, applied, proved, lastFresh)
	}
}
