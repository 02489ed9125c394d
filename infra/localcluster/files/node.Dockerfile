# The node image, offline: the equivalent of kind's images/base/Dockerfile plus the binary-copy part of
# `kind build node-image`, on a Debian bookworm rootfs made with debootstrap (bookworm, not trixie: systemd
# 252 still boots on a cgroup v1 host). Rendered by infra/localcluster/nodeimage.go.
FROM {{ .RootfsImage }}

# Debian's containerd 1.6 is replaced by the v2 build in overlay/ (Kubernetes 1.37 expects containerd 2.x);
# remove Debian's binaries so nothing can pick them by PATH.
RUN rm -f /usr/bin/containerd /usr/bin/containerd-shim /usr/bin/containerd-shim-runc-v1 \
          /usr/bin/containerd-shim-runc-v2 /usr/bin/ctr

COPY overlay/ /

# The same systemd trimming and unit enabling as kind's base image.
RUN find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* \
 && rm -f /etc/systemd/system/*.wants/* \
 && rm -f /lib/systemd/system/local-fs.target.wants/* \
 && rm -f /lib/systemd/system/sockets.target.wants/*udev* \
 && rm -f /lib/systemd/system/sockets.target.wants/*initctl* \
 && rm -f /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf /usr/lib/systemd/systemd /sbin/init \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests /etc/cni/net.d /var/run/cdi /etc/cdi \
 && chmod 755 /kind /kind/bin \
 && ctr oci spec \
      | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
 && containerd --version && runc --version && kubelet --version \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb

ENV container=docker
# docker commit --change cannot set STOPSIGNAL, hence a Dockerfile.
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
