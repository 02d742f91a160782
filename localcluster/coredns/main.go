// Command coredns is CoreDNS (github.com/coredns/coredns) with only the plugins the local
// cluster's real nodes need: kubernetes (Service and headless-Service names from the local API
// server), bind, cache, errors, log, health and ready. Nothing is forwarded: the local cluster
// answers only for its own zones.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
