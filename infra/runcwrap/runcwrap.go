// Package runcwrap removes capabilities that the host cannot grant from OCI runtime specs before runc sees
// them.
//
// Why: some VMs (Firecracker among them) start containers with a capability bounding set that lacks
// CAP_SYS_RESOURCE. Docker asks for every capability in a privileged container and in every
// `docker exec --privileged`, and runc then fails with "unable to apply caps: operation not permitted".
// kind needs both (privileged node containers, and privileged exec for every node command), so the
// project's own dockerd uses a runtime that strips the missing capabilities from the bundle's config.json
// (runc create/run) and from the --process file (runc exec), then executes the real runc.
package runcwrap

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Targets returns the OCI bundle directory and the exec process file named by a runc command line, each
// empty when the command names none.
func Targets(args []string) (bundle, process string) {
	for i, a := range args {
		next := func() string {
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		}
		switch {
		case a == "--bundle" || a == "-b":
			bundle = next()
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		case a == "--process" || a == "-p":
			process = next()
		case strings.HasPrefix(a, "--process="):
			process = strings.TrimPrefix(a, "--process=")
		}
	}
	return bundle, process
}

// capabilitySets are the fields of an OCI LinuxCapabilities object.
var capabilitySets = []string{"bounding", "effective", "inheritable", "permitted", "ambient"}

// StripCapabilities removes the named capabilities from every set of an OCI capabilities object
// (map form, as decoded from JSON). It reports whether anything changed.
func StripCapabilities(caps map[string]any, drop map[string]bool) bool {
	changed := false
	for _, set := range capabilitySets {
		list, ok := caps[set].([]any)
		if !ok {
			continue
		}
		kept := list[:0:0]
		for _, c := range list {
			if name, ok := c.(string); ok && drop[name] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
	return changed
}

// RewriteFile rewrites the JSON file at path in place (atomically), stripping the dropped capabilities
// from the capabilities object found at the given key path ("process","capabilities" for a bundle's
// config.json; "capabilities" for an exec process file). A file without capabilities is left alone.
func RewriteFile(path string, drop map[string]bool, keys ...string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	obj := doc
	for _, k := range keys {
		next, ok := obj[k].(map[string]any)
		if !ok {
			return nil
		}
		obj = next
	}
	if !StripCapabilities(obj, drop) {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".runcwrap-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Prepare applies the capability drop to whatever the runc command line names.
func Prepare(args []string, drop map[string]bool) error {
	bundle, process := Targets(args)
	if bundle != "" {
		cfg := filepath.Join(bundle, "config.json")
		if _, err := os.Stat(cfg); err == nil {
			if err := RewriteFile(cfg, drop, "process", "capabilities"); err != nil {
				return err
			}
		}
	}
	if process != "" {
		if err := RewriteFile(process, drop, "capabilities"); err != nil {
			return err
		}
	}
	return nil
}
