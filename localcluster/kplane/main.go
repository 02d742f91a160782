// Command kplane is a multicall binary for the local cluster used by Project Signal's tests,
// benchmarks and demo: the control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler), the real nodes' kubelet and kube-proxy, and kubectl. The first argument
// picks the component, the rest are that component's own flags. Each component runs as a
// separate process.
package main

import (
	"context"
	"fmt"
	"os"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kplane etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl [flags]")
	os.Exit(2)
}

func runCobra(command *cobra.Command) {
	command.SetArgs(os.Args[2:])
	os.Exit(cli.Run(command))
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "etcd":
		// etcdmain reads its flags from args[1:].
		etcdmain.Main(append([]string{"etcd"}, os.Args[2:]...))
	case "kube-apiserver":
		runCobra(apiserver.NewAPIServerCommand())
	case "kube-controller-manager":
		runCobra(controllermanager.NewControllerManagerCommand())
	case "kube-scheduler":
		runCobra(scheduler.NewSchedulerCommand())
	case "kubelet":
		runCobra(kubelet.NewKubeletCommand(context.Background()))
	case "kube-proxy":
		runCobra(proxy.NewProxyCommand())
	case "kubectl":
		// kubectl reads os.Args itself (plugins), so present it as its own program.
		os.Args = append([]string{"kubectl"}, os.Args[2:]...)
		os.Exit(cli.Run(kubectl.NewDefaultKubectlCommand()))
	default:
		usage()
	}
}
