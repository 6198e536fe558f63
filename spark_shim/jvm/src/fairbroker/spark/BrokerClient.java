package fairbroker.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.time.Duration;
import java.util.Map;

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

  BrokerClient(String baseUrl, String token) {
    this.baseUrl = baseUrl;
    this.token = token;
    // HTTP/1.1: the default HTTP/2 upgrade attempt confuses some plain HTTP servers.
    this.http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(3))
            .build();
  }

  /** {@code sparkbroker://HOST:PORT} to {@code http://HOST:PORT}. */
  static String baseUrl(String masterUrl) {
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
    return "http://" + rest;
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
    HttpResponse<String> response;
    try {
      response = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    } catch (HttpTimeoutException e) {
      throw e;
    } catch (IOException closed) {
      // A pooled connection the server had just closed (its keep-alive ended while the
      // request was being sent) fails with no bytes read. Every call of this API may be
      // repeated (Register with the same id, Heartbeat, SetTarget, Kill, Unregister), so
      // one more try on a fresh connection; a broker that is really down fails again.
      response = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }
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
