package testutil

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// Azurite's well-known development account (its documentation's, the same
// in every installation).
const (
	azuriteAccount = "devstoreaccount1"
	azuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Azurite starts Microsoft's Azure Blob Storage emulator (npm azurite, the
// project's tools/node) on a loopback port, in memory, with the container
// created, and returns the query parameters that point gocloud's
// azureblob at it: azblob://container/prefix + params reaches it as it
// would reach Azure. The account's key is set in the environment for the
// rest of the test. Without node or the package it fails when
// RELAYOUT_REQUIRE_PEERS=1 (as `make test` sets) and skips otherwise.
func Azurite(tb testing.TB, container string) (params string) {
	tb.Helper()
	bin := filepath.Join(Root(), "tools", "node", "node_modules", ".bin", "azurite-blob")
	if _, err := exec.LookPath("node"); err != nil || !exists(bin) {
		Missing(tb, "Azurite (npm azurite) not installed: run `make deps`")
	}
	// The port is free a moment before Azurite binds it; another process
	// (a parallel test package) may take it in between, so a start that
	// lost the port is tried again on another.
	var addr string
	for try := 0; ; try++ {
		var lost bool
		addr, lost = startAzurite(tb, bin, freePort(tb))
		if !lost {
			break
		}
		if try == 4 {
			tb.Fatalf("azurite: lost the port it was given %d times", try+1)
		}
	}
	cred, err := azblob.NewSharedKeyCredential(azuriteAccount, azuriteKey)
	if err != nil {
		tb.Fatal(err)
	}
	client, err := azblob.NewClientWithSharedKeyCredential(fmt.Sprintf("http://%s/%s/", addr, azuriteAccount), cred, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := client.CreateContainer(context.Background(), container, nil); err != nil {
		tb.Fatalf("azurite: create container %s: %v", container, err)
	}
	for k, v := range map[string]string{"AZURE_STORAGE_ACCOUNT": azuriteAccount, "AZURE_STORAGE_KEY": azuriteKey} {
		tb.Setenv(k, v)
	}
	for _, k := range []string{"AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGEBLOB_CONNECTIONSTRING"} {
		if _, ok := os.LookupEnv(k); ok {
			tb.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	return "?protocol=http&localemu=true&domain=" + addr
}

// startAzurite starts Azurite on a loopback port and waits until it
// listens; lost reports that another process had the port.
func startAzurite(tb testing.TB, bin string, port int) (addr string, lost bool) {
	tb.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(port), "--inMemoryPersistence",
		"--disableTelemetry", "--skipApiVersionCheck", "--silent")
	cmd.Dir = tb.TempDir() // what it writes besides the blobs (none in memory mode)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("azurite: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(60 * time.Second); ; {
		select {
		case <-exited:
			if bytes.Contains(out.Bytes(), []byte("EADDRINUSE")) {
				return addr, true
			}
			tb.Fatalf("azurite exited: %s", out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			// Whoever listens must be this Azurite, not a process that
			// took the port before it.
			cl := http.Client{Timeout: 5 * time.Second}
			resp, err := cl.Get("http://" + addr + "/" + azuriteAccount + "?comp=list")
			if err == nil {
				resp.Body.Close()
				if strings.HasPrefix(resp.Header.Get("Server"), "Azurite") {
					break
				}
			}
			stop()
			return addr, true
		}
		select {
		case <-exited:
			continue // reported above
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			tb.Fatalf("azurite did not listen on %s within a minute: %s", addr, out.String())
		}
	}
	tb.Cleanup(stop)
	return addr, false
}

// freePort is a loopback TCP port nothing listened on a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
