package fairbroker.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.Map;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/** The broker's tenant API: POST /v1/<Method> with protobuf-JSON bodies. */
final class BrokerClient {
  /** One answer from the broker; {@code body} is null when it was not JSON. */
  static final class Reply {
    final int status;
    final JsonNode body;
    final String text;

    Reply(int status, JsonNode body, String text) {
      this.status = status;
      this.body = body;
      this.text = text;
    }

    boolean ok() {
      return status >= 200 && status < 300;
    }

    /** 5xx, 408 and 429 may succeed later; other errors will not. */
    boolean retryable() {
      return status >= 500 || status == 408 || status == 429;
    }

    /** The broker's {"error": ..., "code": ...} as one line, or the raw body. */
    String error() {
      if (body != null && body.hasNonNull("error")) {
        String code = body.hasNonNull("code") ? " (" + body.get("code").asText() + ")" : "";
        return "HTTP " + status + ": " + body.get("error").asText() + code;
      }
      String raw = text == null ? "" : text.strip();
      return "HTTP " + status + (raw.isEmpty() ? "" : ": " + raw);
    }
  }

  private static final ObjectMapper JSON = new ObjectMapper();

  final String baseUrl;
  private final String token;
  private final HttpClient http;

  /**
   * {@code caFile}: null for plain HTTP; else a PEM file of the CA certificates to trust, and
   * {@code baseUrl} an https:// URL (the broker serves TLS with tls_cert and tls_key).
   */
  BrokerClient(String baseUrl, String token, String caFile) {
    this.baseUrl = baseUrl;
    this.token = token;
    // HTTP/1.1: the default HTTP/2 upgrade attempt confuses some plain HTTP servers.
    HttpClient.Builder builder =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(3));
    if (caFile != null) {
      builder.sslContext(trusting(caFile));
    }
    this.http = builder.build();
  }

  /** A TLS context that trusts the certificates in {@code caFile} and nothing else. */
  static SSLContext trusting(String caFile) {
    try (InputStream in = Files.newInputStream(Path.of(caFile))) {
      KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
      store.load(null, null);
      int count = 0;
      for (Certificate cert : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
        store.setCertificateEntry("ca-" + count++, cert);
      }
      if (count == 0) {
        throw new GeneralSecurityException("no certificate in it");
      }
      TrustManagerFactory trust =
          TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      trust.init(store);
      SSLContext context = SSLContext.getInstance("TLS");
      context.init(null, trust.getTrustManagers(), null);
      return context;
    } catch (IOException | GeneralSecurityException e) {
      throw new IllegalArgumentException(
          "fairbroker: cannot use spark.fairbroker.caFile " + caFile + ": " + e.getMessage(), e);
    }
  }

  /** {@code sparkbroker://HOST:PORT} to {@code http://HOST:PORT}. */
  static String baseUrl(String masterUrl) {
    return baseUrl(masterUrl, false);
  }

  /** {@code sparkbroker://HOST:PORT} to {@code http(s)://HOST:PORT}. */
  static String baseUrl(String masterUrl, boolean tls) {
    String rest = masterUrl.substring(BrokerClusterManager.SCHEME.length());
    while (rest.endsWith("/")) {
      rest = rest.substring(0, rest.length() - 1);
    }
    URI uri;
    try {
      uri = URI.create("http://" + rest);
    } catch (IllegalArgumentException e) {
      uri = null;
    }
    if (rest.isEmpty() || uri == null || uri.getHost() == null || uri.getPort() < 0
        || (uri.getPath() != null && !uri.getPath().isEmpty())) {
      throw new IllegalArgumentException(
          "fairbroker: master URL must be sparkbroker://HOST:PORT, got " + masterUrl);
    }
    return (tls ? "https://" : "http://") + rest;
  }

  Reply post(String method, Map<String, ?> body, Duration timeout)
      throws IOException, InterruptedException {
    HttpRequest.Builder request =
        HttpRequest.newBuilder(URI.create(baseUrl + "/v1/" + method))
            .timeout(timeout)
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(JSON.writeValueAsString(body)));
    if (token != null && !token.isEmpty()) {
      request.header("Authorization", "Bearer " + token);
    }
    HttpResponse<String> response =
        http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    JsonNode parsed = null;
    try {
      if (response.body() != null && !response.body().isBlank()) {
        parsed = JSON.readTree(response.body());
      }
    } catch (IOException notJson) {
      parsed = null;
    }
    return new Reply(response.statusCode(), parsed, response.body());
  }

  static String json(Object value) {
    try {
      return JSON.writeValueAsString(value);
    } catch (IOException e) {
      return String.valueOf(value);
    }
  }
}
