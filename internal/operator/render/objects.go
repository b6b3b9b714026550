package render

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/dashboards"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
)

// Capabilities the unprivileged agent gets, and why:
//   - BPF: load programs and create maps (bpf(2) without CAP_SYS_ADMIN).
//   - PERFMON: attach tracing programs (kprobes, tracepoints, fentry) used
//     by the drops, rtt and retransmits features, and read perf/ring buffers.
//   - NET_ADMIN: attach TC (tcx/clsact) programs to interfaces and watch
//     links through netlink.
//   - SYS_ADMIN, only when spec.agent.netns is not just "host": setns(2) into
//     other network namespaces requires it.
//
// Not SYS_RESOURCE: the agent never raises RLIMIT_MEMLOCK (kernels since
// 5.11 charge BPF maps to the memory cgroup instead), and a node whose
// runtime cannot grant it (make e2e-kubelet's) could not start the agent.
var (
	BaseCapabilities  = []corev1.Capability{"BPF", "PERFMON", "NET_ADMIN"}
	SetnsCapabilities = []corev1.Capability{"SYS_ADMIN"}
)

// The flowlens API's rights, checked by the collector with
// SubjectAccessReviews (docs/security.md): verb create (Export) or get
// (GetFlows) on the subresource flows of the FlowCollector cluster.
const (
	// ExportRoleName is the ClusterRole the operator binds to the agents'
	// ServiceAccount.
	ExportRoleName = kubeauth.AgentClusterRole
	// ReaderRoleName is the ClusterRole shipped unbound
	// (config/rbac/flows_reader_role.yaml, the chart) for admins to bind to
	// the people who may read the flows.
	ReaderRoleName = kubeauth.ReaderClusterRole
	// ObserveRoleName is the Role of the agent namespace shipped unbound
	// (config/agent-namespace/observe_role.yaml, the chart) with the rest
	// `flowlens observe` needs: find the collector, port-forward, read its CA.
	ObserveRoleName = kubeauth.ObserveRole
	FlowsResource   = "flowcollectors/flows"
)

// FlowsRule allows verb on the flows of the FlowCollector cluster.
func FlowsRule(verb string) *rbacv1ac.PolicyRuleApplyConfiguration {
	return rbacv1ac.PolicyRule().
		WithAPIGroups(v1alpha1.GroupVersion.Group).
		WithResources(FlowsResource).
		WithResourceNames(v1alpha1.SingletonName).
		WithVerbs(verb)
}

// Objects are the apply configurations for everything the operator manages.
// Namespace is nil when the agent namespace exists and is not the
// operator's: then it is used as it is.
type Objects struct {
	Namespace      *corev1ac.NamespaceApplyConfiguration
	ServiceAccount *corev1ac.ServiceAccountApplyConfiguration
	Role           *rbacv1ac.RoleApplyConfiguration
	RoleBinding    *rbacv1ac.RoleBindingApplyConfiguration
	ConfigMap      *corev1ac.ConfigMapApplyConfiguration
	Service        *corev1ac.ServiceApplyConfiguration
	DaemonSet      *appsv1ac.DaemonSetApplyConfiguration
	// AgentExportRole and AgentExportBinding give the agent's
	// ServiceAccount the right to export flows (ExportRoleName).
	AgentExportRole    *rbacv1ac.ClusterRoleApplyConfiguration
	AgentExportBinding *rbacv1ac.ClusterRoleBindingApplyConfiguration
	// MetricsWebConfig is the ConfigMap MetricsWebConfigName: the default
	// metrics web configuration, for the chart's collector.
	MetricsWebConfig *corev1ac.ConfigMapApplyConfiguration
	// Collector is the Kafka collector, nil without a kafka exporter.
	Collector *CollectorObjects
	// Dashboards are the Grafana dashboard ConfigMaps (internal/operator/dashboards), in
	// DashboardsNamespace; empty when spec.dashboards is not enabled.
	Dashboards []*corev1ac.ConfigMapApplyConfiguration
	// ConfigHash is the value of ConfigHashAnnotation on the pod template.
	ConfigHash string
	// CertsDue is when the reconciler checks the certificates again (set
	// by package controller after it applied them, not by Build).
	CertsDue time.Time
}

// Options are the inputs that do not come from the FlowCollector.
type Options struct {
	// DefaultImage is the agent image when spec.agent.image is empty.
	DefaultImage string
	// DefaultCollectorImage is the Kafka collector's image when
	// spec.collector.image is empty.
	DefaultCollectorImage string
	// OwnNamespace says whether the operator creates (and owns) the agent
	// namespace; false when it exists and belongs to someone else.
	OwnNamespace bool
}

// Build renders every managed object from fc, whose spec must be defaulted
// (WithDefaults) and valid (Validate). Every object carries a controller
// owner reference to fc, so deleting fc garbage-collects them.
func Build(fc *v1alpha1.FlowCollector, opts Options) (*Objects, error) {
	spec := &fc.Spec
	ns := spec.Namespace
	cfg, err := AgentConfig(spec)
	if err != nil {
		return nil, err
	}
	o := &Objects{ConfigHash: Hash(cfg)}
	owner := metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.GroupVersion.String()).
		WithKind("FlowCollector").
		WithName(fc.Name).
		WithUID(fc.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
	labels := commonLabels()

	if opts.OwnNamespace {
		o.Namespace = corev1ac.Namespace(ns).
			WithLabels(labels).
			WithLabels(map[string]string{PodSecurityEnforceLabel: "privileged"}).
			WithOwnerReferences(owner)
	}

	o.ServiceAccount = corev1ac.ServiceAccount(AgentName, ns).
		WithLabels(labels).
		WithOwnerReferences(owner)

	// The agent's only API right: reading its own configuration. It needs
	// no cluster-wide access (the node name comes from the downward API).
	o.Role = rbacv1ac.Role(AgentName, ns).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithRules(rbacv1ac.PolicyRule().
			WithAPIGroups("").
			WithResources("configmaps").
			WithResourceNames(ConfigMapName).
			WithVerbs("get", "watch"))
	o.RoleBinding = rbacv1ac.RoleBinding(AgentName, ns).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithRoleRef(rbacv1ac.RoleRef().
			WithAPIGroup(rbacv1.GroupName).
			WithKind("Role").
			WithName(AgentName)).
		WithSubjects(rbacv1ac.Subject().
			WithKind(rbacv1.ServiceAccountKind).
			WithName(AgentName).
			WithNamespace(ns))

	// The right the collector checks before it takes an agent's flows
	// (a SubjectAccessReview of the token's user): create on the flows of
	// the one FlowCollector. Nothing else in the cluster grants it.
	o.AgentExportRole = rbacv1ac.ClusterRole(ExportRoleName).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithRules(FlowsRule("create"))
	o.AgentExportBinding = rbacv1ac.ClusterRoleBinding(ExportRoleName).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(ExportRoleName)).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(AgentName).WithNamespace(ns))

	webCfg, err := WebConfig(spec.Agent.MetricsTLS, spec.MetricsPlaintext, "spec.agent.metricsTLS")
	if err != nil {
		return nil, err
	}
	data := map[string]string{ConfigKey: string(cfg)}
	if webCfg != nil {
		data[WebConfigKey] = string(webCfg)
	}
	o.ConfigMap = corev1ac.ConfigMap(ConfigMapName, ns).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithData(data)

	o.Service = metricsService(MetricsServiceName, ns, labels, selectorLabels(), spec.Agent.MetricsPort, owner)

	defaultWeb, err := DefaultWebConfig()
	if err != nil {
		return nil, err
	}
	o.MetricsWebConfig = corev1ac.ConfigMap(MetricsWebConfigName, ns).
		WithLabels(labels).
		WithLabels(map[string]string{LabelComponent: "certificates"}).
		WithOwnerReferences(owner).
		WithData(map[string]string{WebConfigKey: string(defaultWeb)})

	o.DaemonSet = daemonSet(fc, opts, owner, o.ConfigHash)

	if k := Kafka(spec); k != nil {
		if o.Collector, err = buildCollector(fc, k, opts, owner); err != nil {
			return nil, err
		}
	}

	if dns := DashboardsNamespace(spec); dns != "" {
		cms, err := dashboards.ConfigMaps(dns)
		if err != nil {
			return nil, fmt.Errorf("rendering the Grafana dashboards: %w", err)
		}
		for _, cm := range cms {
			o.Dashboards = append(o.Dashboards, corev1ac.ConfigMap(cm.Name, cm.Namespace).
				WithLabels(labels).
				WithLabels(cm.Labels).
				WithLabels(map[string]string{LabelComponent: DashboardsComponent}).
				WithOwnerReferences(owner).
				WithData(cm.Data))
		}
	}
	return o, nil
}

func commonLabels() map[string]string {
	return map[string]string{
		LabelName:      AgentName,
		LabelPartOf:    "flowlens",
		LabelComponent: "agent",
		LabelManagedBy: ManagedByValue,
	}
}

// selectorLabels select the agent pods. A DaemonSet's selector is immutable,
// so these never change.
func selectorLabels() map[string]string {
	return map[string]string{LabelName: AgentName, LabelPartOf: "flowlens"}
}

func daemonSet(fc *v1alpha1.FlowCollector, opts Options, owner *metav1ac.OwnerReferenceApplyConfiguration, hash string) *appsv1ac.DaemonSetApplyConfiguration {
	spec := &fc.Spec
	image := spec.Agent.Image
	if image == "" {
		image = opts.DefaultImage
	}

	sc := corev1ac.SecurityContext().
		WithRunAsUser(0).
		WithReadOnlyRootFilesystem(true)
	if spec.Agent.Privileged {
		sc.WithPrivileged(true)
	} else {
		caps := append([]corev1.Capability{}, BaseCapabilities...)
		if NeedsSetns(spec) {
			caps = append(caps, SetnsCapabilities...)
		}
		// The runtime's default seccomp profile allows bpf(2) and
		// perf_event_open(2) with CAP_BPF and CAP_PERFMON (make e2e-kubelet
		// runs the agent under containerd's); privileged mode, for runtimes
		// where something blocks the agent, runs without it.
		sc.WithPrivileged(false).
			WithAllowPrivilegeEscalation(false).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL").WithAdd(caps...))
	}

	probe := func(path string, period, failures int32) *corev1ac.ProbeApplyConfiguration {
		return metricsProbe(spec.Agent.MetricsTLS, spec.MetricsPlaintext, path).
			WithPeriodSeconds(period).
			WithTimeoutSeconds(2).
			WithFailureThreshold(failures)
	}

	container := corev1ac.Container().
		WithName(AgentName).
		WithImage(image).
		WithImagePullPolicy(spec.Agent.ImagePullPolicy).
		WithArgs("--config", ConfigPath).
		WithEnv(corev1ac.EnvVar().
			WithName("NODE_NAME").
			WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("spec.nodeName"))),
			// The metrics port on the node's address alone, not on every
			// address of the node (issue #27): the kubelet expands
			// $(HOST_IP), defined before, in the agent's
			// --metrics-address variable; the brackets take an IPv6
			// address too.
			corev1ac.EnvVar().
				WithName(HostIPEnv).
				WithValueFrom(corev1ac.EnvVarSource().
					WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("status.hostIP"))),
			corev1ac.EnvVar().
				WithName(config.EnvName("metrics-address")).
				WithValue("[$("+HostIPEnv+")]:"+strconv.Itoa(int(spec.Agent.MetricsPort)))).
		WithPorts(corev1ac.ContainerPort().
			WithName("metrics").
			WithContainerPort(spec.Agent.MetricsPort).
			WithProtocol(corev1.ProtocolTCP)).
		WithResources(resources(spec.Agent.Resources)).
		WithSecurityContext(sc).
		// Loading and attaching the BPF programs can take a few seconds on a
		// busy node: give start-up a minute before liveness counts.
		WithStartupProbe(probe("/healthz", 5, 12)).
		WithLivenessProbe(probe("/healthz", 10, 3)).
		WithReadinessProbe(probe("/readyz", 5, 3)).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath(ConfigDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("netns").WithMountPath(NetnsDir).
				WithMountPropagation(corev1.MountPropagationHostToContainer).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		)

	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName("config").WithConfigMap(
			corev1ac.ConfigMapVolumeSource().WithName(ConfigMapName)),
		hostPath("netns", NetnsDir, corev1.HostPathDirectoryOrCreate),
		corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource().WithMedium(corev1.StorageMediumMemory)),
	}
	secrets := metricsTLSMounts(spec.Agent.MetricsTLS, spec.MetricsPlaintext)
	if g := GRPC(spec); g != nil && g.TLS != nil {
		secrets = append(secrets, tlsMounts("tls", g.TLS.CASecretRef, g.TLS.ClientSecretRef, TLSCADir, TLSCertDir)...)
	}
	if g := GRPC(spec); g != nil && !g.InsecurePlaintext {
		if g.TLS == nil {
			// The CA bundle the operator publishes (package certs).
			volumes = append(volumes, corev1ac.Volume().WithName("ca").WithConfigMap(
				corev1ac.ConfigMapVolumeSource().WithName(certs.CAName).
					WithItems(corev1ac.KeyToPath().WithKey(certs.BundleKey).WithPath("ca.crt"))))
			container.WithVolumeMounts(corev1ac.VolumeMount().WithName("ca").WithMountPath(CABundleDir).WithReadOnly(true))
		}
		// The agent's identity for the collector: a token of its
		// ServiceAccount for the collector alone (its audience), bound to
		// the pod, which the kubelet renews (the pod itself gets no API
		// token: automountServiceAccountToken is false).
		volumes = append(volumes, corev1ac.Volume().WithName("token").WithProjected(
			corev1ac.ProjectedVolumeSource().WithSources(corev1ac.VolumeProjection().WithServiceAccountToken(
				corev1ac.ServiceAccountTokenProjection().
					WithAudience(TokenAudience).
					WithExpirationSeconds(TokenExpirationSeconds).
					WithPath("token")))))
		container.WithVolumeMounts(corev1ac.VolumeMount().WithName("token").WithMountPath(TokenDir).WithReadOnly(true))
	}
	if k := Kafka(spec); k != nil {
		secrets = append(secrets, kafkaMounts(k)...)
		container.WithEnv(kafkaEnv(k, config.EnvName("kafka-sasl-username"))...)
	}
	if o := OTLP(spec); o != nil {
		if o.TLS != nil {
			secrets = append(secrets, tlsMounts("otlp-tls", o.TLS.CASecretRef, o.TLS.ClientSecretRef, OTLPTLSCADir, OTLPTLSCertDir)...)
		}
		if ref := o.HeadersSecretRef; ref != nil {
			container.WithEnv(secretEnv(config.EnvName("otlp-headers"), ref.Name, OTLPHeadersKey))
		}
	}
	for _, m := range secrets {
		volumes = append(volumes, m.volume())
		container.WithVolumeMounts(m.mount())
	}

	nodeSelector := map[string]string{corev1.LabelOSStable: "linux"}
	maps.Copy(nodeSelector, spec.Agent.NodeSelector)

	podSpec := corev1ac.PodSpec().
		WithServiceAccountName(AgentName).
		// The agent reads its configuration from the mounted ConfigMap and
		// calls no API server: no token in its pods.
		WithAutomountServiceAccountToken(false).
		WithHostNetwork(true).
		WithDNSPolicy(corev1.DNSClusterFirstWithHostNet).
		WithPriorityClassName(spec.Agent.PriorityClassName).
		WithNodeSelector(nodeSelector).
		WithTerminationGracePeriodSeconds(AgentGracePeriodSeconds()).
		WithContainers(container).
		WithVolumes(volumes...)
	for i := range spec.Agent.Tolerations {
		podSpec.WithTolerations(toleration(&spec.Agent.Tolerations[i]))
	}
	for _, s := range spec.Agent.ImagePullSecrets {
		podSpec.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}

	podLabels := commonLabels()
	return appsv1ac.DaemonSet(AgentName, spec.Namespace).
		WithLabels(commonLabels()).
		WithOwnerReferences(owner).
		WithSpec(appsv1ac.DaemonSetSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels())).
			// One node at a time, and no surge: with the host network, an
			// old and a new agent on one node would fight over the port.
			WithUpdateStrategy(appsv1ac.DaemonSetUpdateStrategy().
				WithType(appsv1.RollingUpdateDaemonSetStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDaemonSet().
					WithMaxUnavailable(intstr.FromInt32(1)).
					WithMaxSurge(intstr.FromInt32(0)))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).
				WithAnnotations(map[string]string{ConfigHashAnnotation: hash}).
				WithSpec(podSpec)))
}

func hostPath(name, path string, t corev1.HostPathType) *corev1ac.VolumeApplyConfiguration {
	src := corev1ac.HostPathVolumeSource().WithPath(path)
	if t != corev1.HostPathUnset {
		src.WithType(t)
	}
	return corev1ac.Volume().WithName(name).WithHostPath(src)
}

func resources(r *corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	ac := corev1ac.ResourceRequirements()
	if r == nil {
		return ac
	}
	if len(r.Requests) > 0 {
		ac.WithRequests(r.Requests)
	}
	if len(r.Limits) > 0 {
		ac.WithLimits(r.Limits)
	}
	return ac
}

func toleration(t *corev1.Toleration) *corev1ac.TolerationApplyConfiguration {
	ac := corev1ac.Toleration()
	if t.Key != "" {
		ac.WithKey(t.Key)
	}
	if t.Operator != "" {
		ac.WithOperator(t.Operator)
	}
	if t.Value != "" {
		ac.WithValue(t.Value)
	}
	if t.Effect != "" {
		ac.WithEffect(t.Effect)
	}
	if t.TolerationSeconds != nil {
		ac.WithTolerationSeconds(*t.TolerationSeconds)
	}
	return ac
}

// metricsService is a headless Service (no cluster IP, so scrapers discover
// every pod's endpoint) whose one port, "metrics", leads to the selected
// pods' port of that name.
func metricsService(name, ns string, labels, selector map[string]string, port int32, owner *metav1ac.OwnerReferenceApplyConfiguration) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(name, ns).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithSelector(selector).
			WithPorts(corev1ac.ServicePort().
				WithName("metrics").
				WithProtocol(corev1.ProtocolTCP).
				WithPort(port).
				WithTargetPort(intstr.FromString("metrics"))))
}

// AgentShutdownMargin is what the agent's grace period adds to its
// worst-case shutdown (config.ShutdownWorstCase): the kubelet's own delays
// and a loaded node's scheduling.
const AgentShutdownMargin = 7 * time.Second

// AgentGracePeriodSeconds is the agent DaemonSet's
// terminationGracePeriodSeconds: the agent's worst-case shutdown, from
// the budgets it spends (internal/agent/config), plus AgentShutdownMargin,
// in whole seconds rounded up, so that the two stay consistent.
func AgentGracePeriodSeconds() int64 {
	d := config.ShutdownWorstCase() + AgentShutdownMargin
	return int64((d + time.Second - 1) / time.Second)
}
