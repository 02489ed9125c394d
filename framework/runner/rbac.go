package runner

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures/rbac"
)

// Levels are the shipped roles the runner's ServiceAccount is bound to.
func (o Options) Levels() []string {
	switch {
	case o.Namespace != "":
		return []string{rbac.LevelTeam}
	case o.Disruptive:
		return []string{rbac.LevelNonDisruptive, rbac.LevelDisruptive}
	}
	return []string{rbac.LevelNonDisruptive}
}

// setup creates the namespace (cluster level), the ServiceAccount, the shipped roles the cluster lacks,
// and their bindings, each carrying the runner's label: Cleanup finds them by it.
func (r *Runner) setup(ctx context.Context) error {
	if r.opts.Namespace != "" {
		r.ns = r.opts.Namespace
	} else {
		ns, err := r.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gpuconform-runner-",
			Labels: merge(r.labels(), map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating the runner's namespace: %w", err)
		}
		r.ns, r.ownNS = ns.Name, true
	}
	sa, err := r.kube.CoreV1().ServiceAccounts(r.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: r.meta(r.saName())}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", r.ns, r.saName(), err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: r.ns}}
	for _, level := range r.opts.Levels() {
		roles, err := rbac.Load(level)
		if err != nil {
			return err
		}
		for _, cr := range roles.ClusterRoles {
			if err := r.ensureClusterRole(ctx, cr); err != nil {
				return err
			}
			if _, err := r.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name + "-" + r.id, Labels: r.labels()},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("binding ClusterRole %s: %w", cr.Name, err)
			}
		}
		for _, role := range roles.Roles {
			if err := r.ensureRole(ctx, role); err != nil {
				return err
			}
			if _, err := r.kube.RbacV1().RoleBindings(r.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: r.meta(role.Name + "-" + r.id),
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("binding Role %s/%s: %w", r.ns, role.Name, err)
			}
		}
	}
	return nil
}

// ensureClusterRole creates the shipped ClusterRole when the cluster lacks it (labelled, so Cleanup
// deletes it); an installed one is used as it is, so an administrator's copy is what the run exercises.
func (r *Runner) ensureClusterRole(ctx context.Context, cr rbacv1.ClusterRole) error {
	if _, err := r.kube.RbacV1().ClusterRoles().Get(ctx, cr.Name, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading ClusterRole %s: %w", cr.Name, err)
	}
	cr.Labels = merge(cr.Labels, r.labels())
	if _, err := r.kube.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the shipped ClusterRole %s (the cluster has none; apply fixtures/rbac or give the runner's user the right to create it): %w", cr.Name, err)
	}
	return nil
}

// ensureRole is ensureClusterRole for the team level's Role in the namespace.
func (r *Runner) ensureRole(ctx context.Context, role rbacv1.Role) error {
	if _, err := r.kube.RbacV1().Roles(r.ns).Get(ctx, role.Name, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Role %s/%s: %w", r.ns, role.Name, err)
	}
	role.Namespace, role.Labels = r.ns, merge(role.Labels, r.labels())
	if _, err := r.kube.RbacV1().Roles(r.ns).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the shipped Role %s/%s: %w", r.ns, role.Name, err)
	}
	return nil
}

// merge is a copy of a with b's entries added.
func merge(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
