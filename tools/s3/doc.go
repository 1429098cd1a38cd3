// Package s3 pins the S3-compatible server jobplane's tests run against
// (SeaweedFS), in a module of its own so that its dependencies never enter
// jobplane's. internal/s3test builds it once into a cache directory.
package s3
