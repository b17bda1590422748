package chart

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// want is what a render must look like for its values.
type want struct {
	// tls: gRPC TLS is on, so the probes are httpGet.
	tls bool
	// clusterWide: a ClusterRole instead of Roles.
	clusterWide bool
	// roleNamespaces are the namespaces that get a Role; empty with
	// clusterWide false means no RBAC at all.
	roleNamespaces []string
	// serviceAccount is the name the pod runs as; createsServiceAccount
	// says whether the chart renders it.
	serviceAccount        string
	createsServiceAccount bool
	// apiToken: the kubernetes source is on, so the pod gets an API token.
	apiToken bool
	replicas int32
	grpcPort int32
	// optional: ServiceMonitor, PodDisruptionBudget, PrometheusRule and
	// the dashboard ConfigMap.
	optional bool
	// openPorts: networkPolicy.enabled is false, so no NetworkPolicy.
	openPorts bool
}

// nonRootUID is the image's nonroot user, its USER.
const nonRootUID = 65532

// checkRender runs every check and returns all that fail.
func checkRender(objs []object, w want) error {
	return errors.Join(
		checkPodSecurity(objs),
		checkProbes(objs, w),
		checkPodSpec(objs, w),
		checkServices(objs, w),
		checkRBAC(objs, w),
		checkOptional(objs, w),
		checkMonitoring(objs, w),
	)
}

func checkPodSecurity(objs []object) error {
	dep, err := only[*appsv1.Deployment](objs)
	if err != nil {
		return err
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return fmt.Errorf("want one container, got %d", len(pod.Containers))
	}
	return errors.Join(checkPodSecurityContext(pod.SecurityContext), checkContainerSecurityContext(pod.Containers[0].SecurityContext))
}

func checkPodSecurityContext(psc *corev1.PodSecurityContext) error {
	if psc == nil {
		return errors.New("pod securityContext is missing")
	}
	var errs []error
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		errs = append(errs, errors.New("pod securityContext.runAsNonRoot must be true"))
	}
	if psc.RunAsUser == nil || *psc.RunAsUser != nonRootUID {
		errs = append(errs, fmt.Errorf("pod securityContext.runAsUser must be %d, got %v", nonRootUID, psc.RunAsUser))
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errs = append(errs, errors.New("pod securityContext.seccompProfile.type must be RuntimeDefault"))
	}
	return errors.Join(errs...)
}

func checkContainerSecurityContext(csc *corev1.SecurityContext) error {
	if csc == nil {
		return errors.New("container securityContext is missing")
	}
	var errs []error
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		errs = append(errs, errors.New("container securityContext.readOnlyRootFilesystem must be true"))
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		errs = append(errs, errors.New("container securityContext.allowPrivilegeEscalation must be false"))
	}
	if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
		errs = append(errs, fmt.Errorf("container capabilities must drop ALL and add none, got %+v", csc.Capabilities))
	}
	if csc.RunAsUser != nil && *csc.RunAsUser == 0 {
		errs = append(errs, errors.New("container securityContext.runAsUser must not be 0"))
	}
	return errors.Join(errs...)
}

func checkProbes(objs []object, w want) error {
	dep, err := only[*appsv1.Deployment](objs)
	if err != nil {
		return err
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		return errors.New("liveness and readiness probes are both required")
	}
	if w.tls {
		return errors.Join(
			checkHTTPProbe("liveness", c.LivenessProbe, "/healthz"),
			checkHTTPProbe("readiness", c.ReadinessProbe, "/readyz"),
		)
	}
	return errors.Join(
		checkGRPCProbe("liveness", c.LivenessProbe, ""),
		checkGRPCProbe("readiness", c.ReadinessProbe, "externalscaler.ExternalScaler"),
	)
}

func checkGRPCProbe(which string, p *corev1.Probe, service string) error {
	g := p.GRPC
	if g == nil || p.HTTPGet != nil || p.Exec != nil || p.TCPSocket != nil {
		return fmt.Errorf("%s probe must be a gRPC probe, got %+v", which, p.ProbeHandler)
	}
	got := ""
	if g.Service != nil {
		got = *g.Service
	}
	if g.Port != 9090 || got != service {
		return fmt.Errorf("%s probe must check service %q on port 9090, got %q on %d", which, service, got, g.Port)
	}
	return nil
}

func checkHTTPProbe(which string, p *corev1.Probe, path string) error {
	h := p.HTTPGet
	if h == nil || p.GRPC != nil {
		return fmt.Errorf("%s probe must be httpGet while gRPC speaks TLS, got %+v", which, p.ProbeHandler)
	}
	if h.Path != path || h.Port.String() != "http-metrics" || (h.Scheme != "" && h.Scheme != corev1.URISchemeHTTP) {
		return fmt.Errorf("%s probe must GET %s on port http-metrics over HTTP, got %s on %s", which, path, h.Path, h.Port.String())
	}
	return nil
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func checkPodSpec(objs []object, w want) error {
	dep, err := only[*appsv1.Deployment](objs)
	if err != nil {
		return err
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if !slices.Equal(c.Args, []string{"serve", "--config", "/etc/pelwarden/config.yaml"}) {
		bad("container args must be serve --config /etc/pelwarden/config.yaml, got %q", c.Args)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		bad("container must request and limit memory, got %+v", c.Resources)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != w.replicas {
		bad("replicas must be %d, got %v", w.replicas, dep.Spec.Replicas)
	}
	if pod.ServiceAccountName != w.serviceAccount {
		bad("serviceAccountName must be %q, got %q", w.serviceAccount, pod.ServiceAccountName)
	}
	if sas := all[*corev1.ServiceAccount](objs); (len(sas) == 1 && sas[0].Name == w.serviceAccount) != w.createsServiceAccount {
		bad("ServiceAccount %s must be rendered exactly when serviceAccount.create is true (want %t, rendered %d)",
			w.serviceAccount, w.createsServiceAccount, len(sas))
	}
	// The token is a credential: mount it only for the kubernetes source.
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken != w.apiToken {
		bad("automountServiceAccountToken must be %t, got %v", w.apiToken, pod.AutomountServiceAccountToken)
	}
	if !sha256Hex.MatchString(dep.Spec.Template.Annotations["checksum/config"]) {
		bad("pod template must carry a checksum/config annotation, got %q", dep.Spec.Template.Annotations["checksum/config"])
	}
	spread := pod.Affinity != nil && pod.Affinity.PodAntiAffinity != nil &&
		len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 1 &&
		pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey == "kubernetes.io/hostname"
	if spread != (w.replicas > 1) {
		bad("preferred pod anti-affinity on hostname must be set exactly when replicas > 1 (replicas %d, set %t)", w.replicas, spread)
	}
	return errors.Join(errs...)
}

func checkServices(objs []object, w want) error {
	dep, err := only[*appsv1.Deployment](objs)
	if err != nil {
		return err
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	containerPorts := map[string]int32{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		containerPorts[p.Name] = p.ContainerPort
	}
	var errs []error
	for name, port := range map[string]int32{"grpc": 9090, "http-metrics": 8080} {
		if containerPorts[name] != port {
			errs = append(errs, fmt.Errorf("container port %s must be %d, got %d", name, port, containerPorts[name]))
		}
	}
	found := map[string]bool{}
	for _, svc := range all[*corev1.Service](objs) {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			errs = append(errs, fmt.Errorf("Service %s does not select the pods", svc.Name))
		}
		for _, p := range svc.Spec.Ports {
			wantPort := map[string]int32{"grpc": w.grpcPort, "http-metrics": 8080}[p.Name]
			if p.Port != wantPort || p.TargetPort.String() != p.Name {
				errs = append(errs, fmt.Errorf("Service %s port %s must be %d to target port %s, got %d to %s",
					svc.Name, p.Name, wantPort, p.Name, p.Port, p.TargetPort.String()))
			}
			found[p.Name] = true
		}
	}
	if !found["grpc"] || !found["http-metrics"] || len(all[*corev1.Service](objs)) != 2 {
		errs = append(errs, fmt.Errorf("want two Services, one port grpc and one http-metrics, got ports %v", found))
	}
	return errors.Join(errs...)
}

// podReadRule is the only rule pelwarden's roles may hold.
var podReadRule = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}

func checkRules(kind, name string, rules []rbacv1.PolicyRule) error {
	r := rules
	if len(r) != 1 || !slices.Equal(r[0].APIGroups, podReadRule.APIGroups) || !slices.Equal(r[0].Resources, podReadRule.Resources) ||
		!slices.Equal(r[0].Verbs, podReadRule.Verbs) || len(r[0].ResourceNames) > 0 || len(r[0].NonResourceURLs) > 0 {
		return fmt.Errorf("%s %s must allow exactly get, list, watch on pods, got %+v", kind, name, rules)
	}
	return nil
}

func checkSubjects(kind, name string, subjects []rbacv1.Subject, w want) error {
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: w.serviceAccount, Namespace: namespace}
	if len(subjects) != 1 || subjects[0] != wantSubject {
		return fmt.Errorf("%s %s must bind only ServiceAccount %s/%s, got %+v", kind, name, namespace, w.serviceAccount, subjects)
	}
	return nil
}

func checkRBAC(objs []object, w want) error {
	roles, bindings := all[*rbacv1.Role](objs), all[*rbacv1.RoleBinding](objs)
	cRoles, cBindings := all[*rbacv1.ClusterRole](objs), all[*rbacv1.ClusterRoleBinding](objs)
	var errs []error
	if w.clusterWide {
		if len(cRoles) != 1 || len(cBindings) != 1 || len(roles)+len(bindings) > 0 {
			return fmt.Errorf("clusterWide: want one ClusterRole and ClusterRoleBinding and no Role, got %d, %d, %d",
				len(cRoles), len(cBindings), len(roles))
		}
		errs = append(errs, checkRules("ClusterRole", cRoles[0].Name, cRoles[0].Rules),
			checkSubjects("ClusterRoleBinding", cBindings[0].Name, cBindings[0].Subjects, w))
		if ref := cBindings[0].RoleRef; ref.Kind != "ClusterRole" || ref.Name != cRoles[0].Name {
			errs = append(errs, fmt.Errorf("ClusterRoleBinding must reference ClusterRole %s, got %+v", cRoles[0].Name, ref))
		}
		return errors.Join(errs...)
	}
	if len(cRoles)+len(cBindings) > 0 {
		errs = append(errs, fmt.Errorf("namespaced RBAC must create no ClusterRole or ClusterRoleBinding, got %d", len(cRoles)+len(cBindings)))
	}
	var roleNS []string
	for _, r := range roles {
		roleNS = append(roleNS, r.Namespace)
		errs = append(errs, checkRules("Role", r.Namespace+"/"+r.Name, r.Rules))
		bound := false
		for _, b := range bindings {
			if b.Namespace == r.Namespace && b.RoleRef.Kind == "Role" && b.RoleRef.Name == r.Name {
				bound = true
				errs = append(errs, checkSubjects("RoleBinding", b.Namespace+"/"+b.Name, b.Subjects, w))
			}
		}
		if !bound {
			errs = append(errs, fmt.Errorf("Role %s/%s has no RoleBinding", r.Namespace, r.Name))
		}
	}
	if !slices.Equal(roleNS, w.roleNamespaces) || len(bindings) != len(roles) {
		errs = append(errs, fmt.Errorf("want a Role and RoleBinding in %v, got Roles in %v and %d bindings", w.roleNamespaces, roleNS, len(bindings)))
	}
	return errors.Join(errs...)
}

func checkOptional(objs []object, w want) error {
	count := 0
	if w.optional {
		count = 1
	}
	monitors, pdbs := all[*monitoringv1.ServiceMonitor](objs), all[*policyv1.PodDisruptionBudget](objs)
	if len(monitors) != count || len(pdbs) != count {
		return fmt.Errorf("want %d each of ServiceMonitor and PodDisruptionBudget, got %d, %d", count, len(monitors), len(pdbs))
	}
	errs := []error{checkNetworkPolicy(objs, w)}
	if !w.optional {
		return errors.Join(errs...)
	}
	if eps := monitors[0].Spec.Endpoints; len(eps) != 1 || eps[0].Port != "http-metrics" {
		errs = append(errs, fmt.Errorf("ServiceMonitor must scrape port http-metrics, got %+v", eps))
	}
	metricsSelected := false
	for _, svc := range all[*corev1.Service](objs) {
		sel := labels.SelectorFromSet(monitors[0].Spec.Selector.MatchLabels)
		if sel.Matches(labels.Set(svc.Labels)) {
			metricsSelected = len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Name == "http-metrics"
		}
	}
	if !metricsSelected {
		errs = append(errs, errors.New("ServiceMonitor must select the metrics Service, and only it"))
	}
	return errors.Join(errs...)
}

// checkNetworkPolicy checks that a NetworkPolicy is rendered unless the
// ports are open, that it selects pelwarden's pods, and that each of its
// ingress rules admits one port from named peers only: the gRPC port, then
// the metrics port.
func checkNetworkPolicy(objs []object, w want) error {
	policies := all[*networkingv1.NetworkPolicy](objs)
	if w.openPorts {
		if len(policies) != 0 {
			return fmt.Errorf("networkPolicy.enabled false: want no NetworkPolicy, got %d", len(policies))
		}
		return nil
	}
	if len(policies) != 1 {
		return fmt.Errorf("want one NetworkPolicy, got %d", len(policies))
	}
	np := policies[0]
	dep, err := only[*appsv1.Deployment](objs)
	if err != nil {
		return err
	}
	var errs []error
	if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || sel.Empty() || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		errs = append(errs, fmt.Errorf("NetworkPolicy must select pelwarden's pods and no others, got %v", np.Spec.PodSelector))
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		errs = append(errs, fmt.Errorf("NetworkPolicy must restrict ingress, got policy types %v", np.Spec.PolicyTypes))
	}
	var ports []string
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			ports = append(ports, p.Port.String())
		}
		if len(rule.From) == 0 {
			errs = append(errs, errors.New("NetworkPolicy ingress rules must name their peers"))
		}
		for _, peer := range rule.From {
			if peer.IPBlock == nil && peer.NamespaceSelector == nil && peer.PodSelector == nil {
				errs = append(errs, errors.New("NetworkPolicy peers must each select something"))
			}
		}
	}
	if !slices.Equal(ports, []string{"grpc", "http-metrics"}) {
		errs = append(errs, fmt.Errorf("NetworkPolicy must admit ports grpc and http-metrics, one rule each, got %v", ports))
	}
	return errors.Join(errs...)
}
