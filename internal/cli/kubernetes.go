package cli

import (
	"errors"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/kube"
)

// kubernetesExecutor is the executor of `jobplane worker --executor
// kubernetes`: in-cluster configuration inside a pod unless --kubeconfig
// names a file; otherwise KUBECONFIG or ~/.kube/config.
func kubernetesExecutor(kubeconfig, namespace, image, supervisorImage string) (executor.Executor, error) {
	if namespace == "" {
		return nil, &config.FieldError{Field: "--namespace", Message: "is required with --executor kubernetes"}
	}
	var (
		rc  *rest.Config
		err error
	)
	if kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		rc, err = rest.InClusterConfig()
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, &config.FieldError{Field: "--kubeconfig", Message: err.Error()}
	}
	rc.UserAgent = "jobplane-worker"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	x, err := kube.New(kube.Config{Client: client, Namespace: namespace, Image: image, SupervisorImage: supervisorImage, Clock: clock.Real{}})
	if err != nil {
		return nil, errors.New("--executor kubernetes: " + err.Error())
	}
	return x, nil
}
