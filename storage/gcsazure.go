package storage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"google.golang.org/api/option"
)

// pooledTransport is Go's default transport keeping StoreConnections idle
// connections per host, one for the process (as Go's default is): the
// buckets a process opens on one GCS or Azure endpoint (other buckets or
// containers, or other credentials, each a client of its own: openBucket)
// share its connections.
var pooledTransport = sync.OnceValue(func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = StoreConnections
	t.MaxIdleConns = max(t.MaxIdleConns, StoreConnections)
	return t
})

// gcsAttempts is how many times Google's storage client makes a call
// that fails with a retryable error.
const gcsAttempts = 3

// openGCS opens a gs:// bucket URL (without a path) as gocloud's gcsblob
// URL opener does (the application default credentials; none for an
// emulator named by STORAGE_EMULATOR_HOST, with ?anonymous=true or
// ?access_id=-), but with a storage client on a transport that keeps
// StoreConnections idle connections per host: gocloud's uses Go's default
// transport, which keeps 2. URLs asking for gRPC (grpc, zonal) or another
// universe_domain go to gocloud's opener, their client held to the same
// attempts. access_id and private_key_path otherwise serve signing, which
// relayout does not do.
func openGCS(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	q := u.Query()
	for k := range q {
		switch k {
		case "grpc", "zonal", "universe_domain":
			b, err := blob.OpenBucket(ctx, u.String())
			if err != nil {
				return nil, err
			}
			var sc *storage.Client // gocloud's, gRPC or not
			if b.As(&sc) {
				boundRetries(sc)
			}
			return b, nil
		case "anonymous", "access_id", "private_key_path":
		default:
			return nil, fmt.Errorf("invalid query parameter %q", k)
		}
	}
	anonymous := q.Get("access_id") == "-"
	if v := q.Get("anonymous"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("invalid value %q for query parameter \"anonymous\": %w", v, err)
		}
		anonymous = anonymous || b
	}
	var copts []option.ClientOption
	emulator := os.Getenv("STORAGE_EMULATOR_HOST")
	if emulator != "" || anonymous {
		copts = []option.ClientOption{option.WithoutAuthentication(), option.WithHTTPClient(&http.Client{Transport: pooledTransport()})}
		if emulator != "" {
			copts = append(copts, option.WithEndpoint("http://"+emulator+"/storage/v1/"))
		}
	} else {
		creds, err := gcp.DefaultCredentials(ctx)
		if err != nil {
			return nil, fmt.Errorf("Google application default credentials: %w", err)
		}
		client, err := gcp.NewHTTPClient(pooledTransport(), creds.TokenSource)
		if err != nil {
			return nil, err
		}
		copts = []option.ClientOption{option.WithHTTPClient(&client.Client)}
		if ud, err := creds.GetUniverseDomain(); err == nil && ud != "" {
			copts = append(copts, option.WithUniverseDomain(ud))
		}
	}
	sc, err := storage.NewClient(ctx, copts...)
	if err != nil {
		return nil, err
	}
	boundRetries(sc)
	return gcsblob.OpenBucket(ctx, nil, u.Host, &gcsblob.Options{Client: sc})
}

// boundRetries tells a storage client, ours or gocloud's, how many
// attempts a call gets (gcsAttempts, as the AWS SDK's standard retryer
// makes). Untold, it retries until its context ends: against a store
// answering 503 (or UNAVAILABLE over gRPC) for good, a run or a loader
// waited for ever. Reads are retried around that (Retry), and a
// persistent failure is exit 4 as on S3 (TestGCSStoreDownIsTransient,
// TestGCSGRPCStoreDownIsTransient, TestRemoteGCSStoreDown).
func boundRetries(sc *storage.Client) {
	sc.SetRetry(storage.WithMaxAttempts(gcsAttempts))
}

// openAzure opens an azblob:// bucket URL (without a path) as gocloud's
// azureblob URL opener does, with the same query parameters, environment
// and credentials, but on a transport that keeps StoreConnections idle
// connections per host (the Azure SDK's keeps 10).
func openAzure(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	o := &azureblob.URLOpener{MakeClient: azureClient, ServiceURLOptions: *azureblob.NewDefaultServiceURLOptions()}
	return o.OpenBucketURL(ctx, u)
}

// azureClient is gocloud's default azureblob client (credentials from the
// environment in its order: the account's key, a SAS token, a connection
// string, then azidentity's DefaultAzureCredential) on pooledTransport.
func azureClient(svcURL azureblob.ServiceURL, name azureblob.ContainerName) (*container.Client, error) {
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: pooledTransport()}}}
	containerURL, err := url.JoinPath(string(svcURL), string(name))
	if err != nil {
		return nil, err
	}
	account, key := os.Getenv("AZURE_STORAGE_ACCOUNT"), os.Getenv("AZURE_STORAGE_KEY")
	conn := os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	if conn == "" {
		conn = os.Getenv("AZURE_STORAGEBLOB_CONNECTIONSTRING")
	}
	switch {
	case account != "" && key != "":
		cred, err := azblob.NewSharedKeyCredential(account, key)
		if err != nil {
			return nil, fmt.Errorf("Azure shared key: %w", err)
		}
		return container.NewClientWithSharedKeyCredential(containerURL, cred, opts)
	case os.Getenv("AZURE_STORAGE_SAS_TOKEN") != "": // in svcURL already
		return container.NewClientWithNoCredential(containerURL, opts)
	case conn != "":
		return container.NewClientFromConnectionString(conn, string(name), opts)
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, errors.Join(errors.New("no Azure credential: set AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN or AZURE_STORAGE_CONNECTION_STRING, or configure azidentity"), err)
	}
	return container.NewClient(containerURL, cred, opts)
}
