// Command signal-static is the one static program of the local cluster's real nodes. It is
// the pause container of every Pod sandbox (as /pause), the holder of each node's namespaces,
// and the test image's tool (as /nettest): serve, dial, connect, apiget, lookup, sleep, exit.
//
// It has no dependencies beyond the Go standard library and is built with CGO_ENABLED=0, so
// the images that hold it need nothing else.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name != "pause" && len(args) > 0 && args[0] == "pause" {
		name, args = "pause", args[1:]
	}
	if name == "pause" {
		pause()
		return
	}
	if len(args) == 0 {
		usage()
	}
	switch args[0] {
	case "echo":
		fmt.Println(strings.Join(args[1:], " "))
	case "exit":
		code := 0
		if len(args) > 1 {
			code, _ = strconv.Atoi(args[1])
		}
		os.Exit(code)
	case "sleep":
		seconds, _ := strconv.ParseFloat(get(args, 1), 64)
		time.Sleep(time.Duration(seconds * float64(time.Second)))
	case "serve":
		serve(get(args, 1))
	case "dial":
		dial(get(args, 1))
	case "connect":
		seconds := 20.0
		if len(args) > 2 {
			seconds, _ = strconv.ParseFloat(args[2], 64)
		}
		connect(get(args, 1), time.Duration(seconds*float64(time.Second)))
	case "apiget":
		apiget(get(args, 1))
	case "lookup":
		lookup(get(args, 1))
	case "hostname":
		host, err := os.Hostname()
		check(err, "hostname")
		fmt.Println(host)
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: pause | nettest echo WORDS | exit CODE | sleep SECONDS | serve PORT | dial HOST:PORT | connect HOST:PORT [SECONDS] | apiget PATH | lookup NAME | hostname")
	os.Exit(2)
}

func get(args []string, i int) string {
	if len(args) <= i {
		usage()
	}
	return args[i]
}

func check(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}

// pause waits for SIGINT or SIGTERM and reaps the zombies it inherits as PID 1.
func pause() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// serve answers every TCP connection on PORT with "<hostname> <remote address>\n".
func serve(port string) {
	listener, err := net.Listen("tcp", ":"+port)
	check(err, "listen")
	host, _ := os.Hostname()
	for {
		conn, err := listener.Accept()
		check(err, "accept")
		go func(c net.Conn) {
			defer c.Close()
			fmt.Fprintf(c, "%s %s\n", host, c.RemoteAddr())
		}(conn)
	}
}

// dial connects to ADDRESS (retrying for up to 20 s) and prints what the server says.
func dial(address string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", address, 2*time.Second)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = io.Copy(os.Stdout, conn)
			conn.Close()
			check(err, "read "+address)
			return
		}
		if time.Now().After(deadline) {
			check(err, "dial "+address)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// connect opens a TCP connection to ADDRESS (retrying for up to LIMIT), prints "connected" and
// closes it: for servers that wait for the client to speak first (TLS).
func connect(address string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		conn, err := net.DialTimeout("tcp", address, 2*time.Second)
		if err == nil {
			conn.Close()
			fmt.Println("connected", address)
			return
		}
		if time.Now().After(deadline) {
			check(err, "connect "+address)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// apiget GETs PATH from the API server with the Pod's in-cluster configuration (the
// kubernetes Service from the environment, the ServiceAccount token and CA the kubelet mounts)
// and prints the HTTP status code, then the body.
func apiget(path string) {
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount/"
	token, err := os.ReadFile(dir + "token")
	check(err, "read token")
	ca, err := os.ReadFile(dir + "ca.crt")
	check(err, "read ca.crt")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		check(fmt.Errorf("no certificate in ca.crt"), "ca.crt")
	}
	host := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	request, err := http.NewRequest(http.MethodGet, "https://"+host+path, nil)
	check(err, "request")
	request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	response, err := client.Do(request)
	check(err, "GET "+path)
	defer response.Body.Close()
	fmt.Println(response.StatusCode)
	_, err = io.Copy(os.Stdout, response.Body)
	check(err, "read body")
}

// lookup resolves NAME through /etc/resolv.conf (the Pod's cluster DNS) and prints its addresses.
func lookup(name string) {
	resolver := &net.Resolver{PreferGo: true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := resolver.LookupHost(ctx, name)
	check(err, "lookup "+name)
	fmt.Println(strings.Join(addrs, " "))
}
