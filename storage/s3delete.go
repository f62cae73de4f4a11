package storage

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
)

// s3DeleteBatch is the most keys one S3 DeleteObjects request takes.
const s3DeleteBatch = 1000

// deleteS3Batches removes keys (relative to out) from an S3 bucket with
// DeleteObjects, a thousand keys a request, and returns the keys it left
// to the caller: all of them where out is not S3, and those whose names
// s3blob would escape (a control character, "../", "__0x"), which only
// its own Delete names correctly. gocloud's Delete is a HEAD and a DELETE
// per object (s3blob checks that the object exists first): commit's
// cleanup of a 1,200-folder output's work prefix was 4,800 requests, 3 to
// 4 s of its 6 on a store 10 ms away. An object already gone is no error,
// as for RemovePrefix.
func deleteS3Batches(ctx context.Context, out Location, keys []string) (rest []string, err error) {
	var client *s3.Client
	u, perr := url.Parse(out.Name)
	if len(keys) == 0 || out.Local != "" || perr != nil || u.Scheme != "s3" || u.Host == "" || !out.Bucket.As(&client) {
		return keys, nil
	}
	var batch []string
	for _, k := range keys {
		if plainS3Key(out.Key(k)) {
			batch = append(batch, k)
		} else {
			rest = append(rest, k)
		}
	}
	n := (len(batch) + s3DeleteBatch - 1) / s3DeleteBatch
	err = par.ForEach(ctx, n, min(n, removeParallel), func(i int) error {
		part := batch[i*s3DeleteBatch : min((i+1)*s3DeleteBatch, len(batch))]
		objs := make([]types.ObjectIdentifier, len(part))
		for j, k := range part {
			objs[j] = types.ObjectIdentifier{Key: aws.String(out.Key(k))}
		}
		return Retry(ctx, func() error {
			res, err := client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(u.Host), Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)}})
			if err != nil {
				return Classify(fmt.Errorf("remove %d objects under %s: %w", len(part), out.URL(""), err))
			}
			for _, e := range res.Errors {
				if aws.ToString(e.Code) == "NoSuchKey" {
					continue
				}
				// Per-key failures (AccessDenied, InternalError, SlowDown)
				// as S3 reports them: transient unless denied.
				err := fmt.Errorf("remove s3://%s/%s: %s: %s", u.Host, aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
				if aws.ToString(e.Code) == "AccessDenied" {
					return errs.Preconditionf("allow these credentials s3:DeleteObject on the output", "%v", err)
				}
				return errs.TransientErr(err)
			}
			return nil
		})
	})
	return rest, err
}

// plainS3Key reports whether s3blob sends key as it is (escapeKey leaves
// it alone, and unescapes nothing in it).
func plainS3Key(key string) bool {
	for _, c := range key {
		if c < 32 {
			return false
		}
	}
	return !strings.Contains(key, "../") && !strings.Contains(key, "__0x")
}
