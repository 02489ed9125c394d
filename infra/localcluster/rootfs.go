package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// rootfsPackages are installed into the node rootfs: what kind's base image installs (systemd, iptables and
// nftables, iproute2, conntrack, socat, ethtool, mount tools, jq, ...) plus runc and the reference CNI
// plugins from Debian, which stand in for the ones kind compiles.
var rootfsPackages = []string{
	"systemd", "dbus", "iptables", "nftables", "iproute2", "runc", "containernetworking-plugins", "conntrack",
	"socat", "ethtool", "kmod", "util-linux", "mount", "procps", "libseccomp2", "pigz", "ca-certificates", "jq",
}

// debianMirror is the mirror debootstrap uses: the host's own when it names one, else Debian's default.
func debianMirror() string {
	for _, f := range []string{"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) >= 2 && fields[0] == "URIs:" && !strings.Contains(fields[1], "security"):
				return fields[1]
			case len(fields) >= 3 && fields[0] == "deb" && !strings.Contains(fields[1], "security"):
				return fields[1]
			}
		}
	}
	return "http://deb.debian.org/debian"
}

// RootfsKey is the content key of the node rootfs.
func RootfsKey() string {
	return NewKey("rootfs").Value("suite", DebianSuite).Value("variant", "minbase").
		Value("packages", strings.Join(rootfsPackages, ",")).Sum()
}

// rootfsState returns the rootfs key and whether both the rootfs and its image are already built.
func (c *Cluster) rootfsState(ctx context.Context) (string, bool, error) {
	key := RootfsKey()
	built := exists(filepath.Join(c.opts.CacheDir, "rootfs", key)) && imageKey(ctx, rootfsImageRepo+":"+key) == key
	return key, built, nil
}

// buildRootfs debootstraps the node rootfs into the cache and imports it as a local image.
func (c *Cluster) buildRootfs(ctx context.Context) (dir, image string, err error) {
	key := RootfsKey()
	dir, _, err = c.cachedDir("rootfs", key, func(out string) error {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			if err := c.run(ctx, "apt-get install debootstrap", "env", "DEBIAN_FRONTEND=noninteractive",
				"apt-get", "install", "-y", "-qq", "debootstrap"); err != nil {
				return fmt.Errorf("debootstrap is missing and could not be installed: %w", err)
			}
		}
		return c.run(ctx, "debootstrap", "debootstrap", "--variant=minbase",
			"--include="+strings.Join(rootfsPackages, ","), DebianSuite, out, debianMirror())
	})
	if err != nil {
		return "", "", err
	}
	image = rootfsImageRepo + ":" + key
	if imageKey(ctx, image) == key {
		return dir, image, nil
	}
	// docker import of the tree; the pseudo filesystems stay out of the image.
	script := fmt.Sprintf("tar -C %q --numeric-owner --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* -c . | docker import --change 'LABEL %s=%s' - %s",
		dir, imageLabel, key, image)
	if err := c.run(ctx, "docker import rootfs", "sh", "-c", script); err != nil {
		return "", "", err
	}
	return dir, image, nil
}
