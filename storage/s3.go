package storage

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// StoreConnections is how many idle connections an s3://, gs:// or
// azblob:// bucket keeps to its endpoint: as many as relayout sends
// requests to one store at once (the loader's default MaxRequests). The
// clients' defaults keep fewer (the AWS SDK's and Azure's 10, Go's default
// transport, which the GCS client uses, 2), so with more requests in flight
// every one past those opened a connection (on a real store a TCP and TLS
// handshake) and closed it after its response.
const StoreConnections = 64

// openS3 opens an s3:// bucket URL (without a path) as gocloud's s3blob URL
// opener does, with the same query parameters, but with an HTTP client that
// keeps StoreConnections idle connections per host, and one more parameter:
// requester_pays=true sends x-amz-request-payer: requester with every
// request, which a requester-pays bucket requires.
func openS3(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	q := u.Query()
	// take removes a non-empty parameter from q and returns it (s3blob's
	// opener consumes these; gocloud's AWS config refuses them).
	take := func(key string) (string, bool) {
		v := q.Get(key)
		if v == "" {
			return "", false
		}
		q.Del(key)
		return v, true
	}
	bool1 := func(key, v string) (bool, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("invalid value for %q: %w", key, err)
		}
		return b, nil
	}
	var bo s3blob.Options
	var so []func(*s3.Options)
	if v, ok := take("ssetype"); ok {
		found := false
		for _, t := range s3types.ServerSideEncryptionAes256.Values() {
			if strings.EqualFold(string(t), v) {
				bo.EncryptionType, found = t, true
			}
		}
		if !found {
			return nil, fmt.Errorf("%q is not a valid value for %q", v, "ssetype")
		}
	}
	if v, ok := take("kmskeyid"); ok {
		bo.KMSEncryptionID = v
	}
	if v, ok := take("accelerate"); ok {
		b, err := bool1("accelerate", v)
		if err != nil {
			return nil, err
		}
		so = append(so, func(o *s3.Options) { o.UseAccelerate = b })
	}
	if v, ok := take("disable_https"); ok {
		b, err := bool1("disable_https", v)
		if err != nil {
			return nil, err
		}
		so = append(so, func(o *s3.Options) { o.EndpointOptions.DisableHTTPS = b })
	}
	for _, key := range []string{"use_path_style", "s3ForcePathStyle"} {
		if v, ok := take(key); ok {
			b, err := bool1(key, v)
			if err != nil {
				return nil, err
			}
			so = append(so, func(o *s3.Options) { o.UsePathStyle = b })
		}
	}
	if v, ok := take("requester_pays"); ok {
		b, err := bool1("requester_pays", v)
		if err != nil {
			return nil, err
		}
		if b {
			// A requester-pays bucket (public datasets often are) answers
			// 403 to every request without this header: the reader agrees
			// to pay for the requests and the bytes.
			so = append(so, func(o *s3.Options) {
				o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue("x-amz-request-payer", "requester"))
			})
		}
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, err
	}
	// The config's own client, options added (a CA bundle from the
	// environment or shared config is one of its options already).
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		cfg.HTTPClient = bc.WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = StoreConnections
			t.MaxIdleConns = max(t.MaxIdleConns, StoreConnections)
		})
	}
	bo.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	return s3blob.OpenBucket(ctx, s3.NewFromConfig(cfg, so...), u.Host, &bo)
}
