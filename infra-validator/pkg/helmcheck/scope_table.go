package helmcheck

import "k8s.io/apimachinery/pkg/runtime/schema"

// builtinScopes maps every resource kind Kubernetes v1.37 serves (the
// default API groups, plus the alpha and beta kinds it can enable) to
// whether it is namespaced. The operator's Helm applier tests compare it
// with the discovery of a real kube-apiserver.
var builtinScopes = map[schema.GroupKind]bool{
	// core
	{Group: "", Kind: "Binding"}:               true,
	{Group: "", Kind: "ComponentStatus"}:       false,
	{Group: "", Kind: "ConfigMap"}:             true,
	{Group: "", Kind: "Endpoints"}:             true,
	{Group: "", Kind: "Event"}:                 true,
	{Group: "", Kind: "LimitRange"}:            true,
	{Group: "", Kind: "Namespace"}:             false,
	{Group: "", Kind: "Node"}:                  false,
	{Group: "", Kind: "PersistentVolume"}:      false,
	{Group: "", Kind: "PersistentVolumeClaim"}: true,
	{Group: "", Kind: "Pod"}:                   true,
	{Group: "", Kind: "PodTemplate"}:           true,
	{Group: "", Kind: "ReplicationController"}: true,
	{Group: "", Kind: "ResourceQuota"}:         true,
	{Group: "", Kind: "Secret"}:                true,
	{Group: "", Kind: "Service"}:               true,
	{Group: "", Kind: "ServiceAccount"}:        true,

	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          false,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   false,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     false,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        false,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: false,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   false,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 false,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             false,

	{Group: "apps", Kind: "ControllerRevision"}: true,
	{Group: "apps", Kind: "DaemonSet"}:          true,
	{Group: "apps", Kind: "Deployment"}:         true,
	{Group: "apps", Kind: "ReplicaSet"}:         true,
	{Group: "apps", Kind: "StatefulSet"}:        true,

	{Group: "authentication.k8s.io", Kind: "SelfSubjectReview"}:       false,
	{Group: "authentication.k8s.io", Kind: "TokenReview"}:             false,
	{Group: "authorization.k8s.io", Kind: "LocalSubjectAccessReview"}: true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}:  false,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectRulesReview"}:   false,
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"}:      false,
	{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}:           true,
	{Group: "batch", Kind: "CronJob"}:                                 true,
	{Group: "batch", Kind: "Job"}:                                     true,

	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: false,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:        false,
	{Group: "certificates.k8s.io", Kind: "PodCertificateRequest"}:     true,
	{Group: "coordination.k8s.io", Kind: "Lease"}:                     true,
	{Group: "coordination.k8s.io", Kind: "LeaseCandidate"}:            true,
	{Group: "discovery.k8s.io", Kind: "EndpointSlice"}:                true,
	{Group: "events.k8s.io", Kind: "Event"}:                           true,

	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                 false,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}: false,
	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}:                false,

	{Group: "networking.k8s.io", Kind: "IPAddress"}:     false,
	{Group: "networking.k8s.io", Kind: "Ingress"}:       true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:  false,
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}: true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:   false,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:        false,
	{Group: "policy", Kind: "PodDisruptionBudget"}:      true,

	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        false,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: false,
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               true,
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        true,

	{Group: "resource.k8s.io", Kind: "DeviceClass"}:           false,
	{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}:       false,
	{Group: "resource.k8s.io", Kind: "ResourceClaim"}:         true,
	{Group: "resource.k8s.io", Kind: "ResourceClaimTemplate"}: true,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:         false,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:       false,
	{Group: "scheduling.k8s.io", Kind: "Workload"}:            true,

	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                        false,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                          false,
	{Group: "storage.k8s.io", Kind: "CSIStorageCapacity"}:               true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                     false,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                 false,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}:            false,
	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}: false,
}

// customScopes are well-known custom kinds whose scope is fixed by their
// projects' CRDs; the Helm applier still asks the API server at apply
// time. Any other custom kind is ScopeUnknown.
var customScopes = map[schema.GroupKind]bool{
	{Group: "monitoring.coreos.com", Kind: "ServiceMonitor"}:      true,
	{Group: "monitoring.coreos.com", Kind: "PodMonitor"}:          true,
	{Group: "monitoring.coreos.com", Kind: "PrometheusRule"}:      true,
	{Group: "monitoring.coreos.com", Kind: "Probe"}:               true,
	{Group: "cert-manager.io", Kind: "Certificate"}:               true,
	{Group: "cert-manager.io", Kind: "Issuer"}:                    true,
	{Group: "cert-manager.io", Kind: "ClusterIssuer"}:             false,
	{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute"}:       true,
	{Group: "gateway.networking.k8s.io", Kind: "GRPCRoute"}:       true,
	{Group: "gateway.networking.k8s.io", Kind: "Gateway"}:         true,
	{Group: "gateway.networking.k8s.io", Kind: "GatewayClass"}:    false,
	{Group: "keda.sh", Kind: "ScaledObject"}:                      true,
	{Group: "keda.sh", Kind: "ScaledJob"}:                         true,
	{Group: "keda.sh", Kind: "TriggerAuthentication"}:             true,
	{Group: "keda.sh", Kind: "ClusterTriggerAuthentication"}:      false,
	{Group: "external-secrets.io", Kind: "ExternalSecret"}:        true,
	{Group: "external-secrets.io", Kind: "SecretStore"}:           true,
	{Group: "external-secrets.io", Kind: "ClusterSecretStore"}:    false,
	{Group: "external-secrets.io", Kind: "ClusterExternalSecret"}: false,
	{Group: "autoscaling.k8s.io", Kind: "VerticalPodAutoscaler"}:  true,
}
