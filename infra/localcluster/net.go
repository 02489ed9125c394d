package localcluster

// netManifest is installed by kind itself as the node image's /kind/manifests/default-cni.yaml, so pods get
// a network before anything else runs. kind renders it with text/template ({{ .PodSubnet }}) only when it
// carries the marker line below.
const netManifest = `# would you kindly template this file
# gpuconform-net: the local cluster's pod network agent (internal/nodenet).
apiVersion: v1
kind: ServiceAccount
metadata:
  name: gpuconform-net
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: gpuconform-net
rules:
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: gpuconform-net
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: gpuconform-net
subjects:
- kind: ServiceAccount
  name: gpuconform-net
  namespace: kube-system
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: gpuconform-net
  namespace: kube-system
  labels:
    app: gpuconform-net
spec:
  selector:
    matchLabels:
      app: gpuconform-net
  template:
    metadata:
      labels:
        app: gpuconform-net
    spec:
      hostNetwork: true
      serviceAccountName: gpuconform-net
      priorityClassName: system-node-critical
      tolerations:
      - operator: Exists
      containers:
      - name: gpuconform-net
        image: ` + ImageNet + `
        imagePullPolicy: IfNotPresent
        args: ["--pod-subnet={{ .PodSubnet }}"]
        env:
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        securityContext:
          privileged: true
        resources:
          requests:
            cpu: 10m
            memory: 16Mi
        volumeMounts:
        - name: host
          mountPath: /host
      volumes:
      - name: host
        hostPath:
          path: /
`
