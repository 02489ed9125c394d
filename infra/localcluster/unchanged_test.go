package localcluster

import "testing"

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
