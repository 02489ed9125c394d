package localcluster

import (
	"context"
	"path/filepath"
)

// The local cluster's Gateway API implementation: the Gateway API's standard CRDs (from the
// sigs.k8s.io/gateway-api module Traefik's release builds on) and Traefik Proxy (manifests/traefik.yaml),
// which accepts GatewayClass GatewayClassName and routes the traffic of the Gateways and HTTPRoutes
// attached to it. It is what a platform's gateway is to a real cluster, for the inference gateway
// scenario; selfcheck's fault scales GatewayDeployment to zero.
const (
	GatewayNamespace  = "traefik"
	GatewayDeployment = "traefik"
	GatewayClassName  = "traefik"
	gatewayService    = "traefik"
)

// gatewayCRDs are the Gateway API's standard channel CRDs the suite and Traefik use.
var gatewayCRDs = []string{"gatewayclasses", "gateways", "httproutes", "grpcroutes", "referencegrants", "backendtlspolicies"}

// installGateway applies the Gateway API's standard CRDs, then runs Traefik and waits until it has
// accepted its GatewayClass.
func (c *Cluster) installGateway(ctx context.Context, build *background) error {
	src, err := c.moduleDir(ctx, compTraefik, "sigs.k8s.io/gateway-api")
	if err != nil {
		return err
	}
	crds, err := concatYAML(filepath.Join(src, "config/crd/standard"))
	if err != nil {
		return err
	}
	if err := c.applyManifest(ctx, "Gateway API CRDs", crds); err != nil {
		return err
	}
	established := []string{"wait", "--for=condition=Established", "--timeout=60s"}
	for _, r := range gatewayCRDs {
		established = append(established, "crd/"+r+".gateway.networking.k8s.io")
	}
	if err := c.kubectl(ctx, "Gateway API CRDs established", established...); err != nil {
		return err
	}
	return c.installAddon(ctx, build, keyedAddon{namespace: GatewayNamespace, part: "traefik", what: "Traefik, the Gateway API implementation",
		image: c.traefikImage, repo: traefikImageRepo, manifest: "traefik.yaml",
		values: map[string]string{"Deployment": GatewayDeployment, "GatewayClass": GatewayClassName, "Service": gatewayService},
		kinds:  "deployments,services,serviceaccounts",
		prove: func() error {
			if err := c.kubectl(ctx, "rollout traefik", "-n", GatewayNamespace, "rollout", "status", "deploy/"+GatewayDeployment, "--timeout=180s"); err != nil {
				return err
			}
			return c.kubectl(ctx, "gatewayclass Accepted", "wait", "--for=condition=Accepted", "--timeout=120s", "gatewayclass/"+GatewayClassName)
		}})
}
