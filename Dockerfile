# The same image as `make image` (which needs no Docker daemon): a static
# relayout on distroless/static (CA certificates, user nonroot 65532),
# relayout as the entrypoint.
#   docker build -t REGISTRY/relayout:VERSION --build-arg VERSION=VERSION .
FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/relayout/relayout/internal/version.Version=${VERSION}" \
    -o /relayout ./cmd/relayout

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title=relayout org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.source=https://github.com/relayout/relayout
COPY --from=build /relayout /usr/local/bin/relayout
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/relayout"]
