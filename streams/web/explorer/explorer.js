// The explorer over this service's own /openapi.json. It lives in a file of its own because the
// page's content security policy allows no inline script (streams/web/explorer.py).
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  displayOperationId: true,
  displayRequestDuration: true,
  // Swagger UI's default validator badge calls validator.swagger.io: never call another origin.
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
